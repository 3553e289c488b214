"""Query results as text, in the output modes of the DuckDB shell: box (its duckbox), line, csv, json, markdown.

Box mode shows at most ``maxrows`` rows, the first and the last half, with a footer such as "26115 rows
(40 shown)", as DuckDB's duckbox does; the other modes write every row (DuckDB limits duckbox alone).
Doubles are shown at a readable precision in box, line and markdown (``readable``: 7 significant digits,
where DuckDB's duckbox prints the shortest round trip, 0.30000000000000004); csv and json, which other
programs read, keep every digit.
"""

from __future__ import annotations

import csv
import io
import json
import math
import textwrap
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

MODES = ("box", "line", "csv", "json", "markdown")
ALIASES = {"duckbox": "box"}  # DuckDB's name for its default mode
DEFAULT_MAXROWS = 40  # DuckDB's .maxrows default
MAX_ROWS = 1_000_000_000  # box mode's largest row limit: the other modes write every row
MAX_CELL = 60  # box mode cuts a longer value (with "…"); the other modes write it whole
SIGNIFICANT = 7  # digits of a double in the readable modes
NUMERIC_TYPES = (
    "TINYINT SMALLINT INTEGER BIGINT HUGEINT UTINYINT USMALLINT UINTEGER UBIGINT UHUGEINT FLOAT DOUBLE"
).split()
TYPE_NAMES = {  # DuckDB's shell prints integer types by their width
    "TINYINT": "int8",
    "SMALLINT": "int16",
    "INTEGER": "int32",
    "BIGINT": "int64",
    "HUGEINT": "int128",
    "UTINYINT": "uint8",
    "USMALLINT": "uint16",
    "UINTEGER": "uint32",
    "UBIGINT": "uint64",
    "UHUGEINT": "uint128",
}


@dataclass
class Result:
    """What a statement returned, as far as it is shown: the first ``rows`` and the ``last`` ones of ``total``.

    ``types`` are DuckDB's type names (numbers are right-aligned), shown under the names unless
    ``show_types`` is off (a table of ours); ``wrap`` folds longer values onto more lines in box mode
    instead of cutting them; ``pairs``: a table of (field, value) rows, one ``field = value`` line each in
    line mode.
    """

    columns: list[str]
    types: list[str] | None
    rows: list[tuple]
    last: list[tuple] = field(default_factory=list)
    total: int | None = None
    wrap: int | None = None
    show_types: bool = True
    pairs: bool = False

    def __post_init__(self) -> None:
        if self.total is None:
            self.total = len(self.rows) + len(self.last)


def check_mode(mode: str) -> str:
    """``mode`` as one of MODES, or an error that lists them."""
    mode = ALIASES.get(mode, mode)
    if mode not in MODES:
        raise ValueError(f"unknown output mode {mode!r}: choose one of {', '.join(MODES)}.")
    return mode


def whole_number(text: str, low: int, high: int) -> int | None:
    """``text`` as a whole number from ``low`` to ``high`` written in ASCII digits, else None (its length is
    checked first: Python refuses to convert more than 4300 digits)."""
    digits = text.lstrip("0") or "0"
    if not (text.isascii() and text.isdigit()) or len(digits) > len(str(high)):
        return None
    return int(digits) if low <= int(digits) <= high else None


def readable(value: float) -> str:
    """A double as a person reads it: 7 significant digits, the whole integer part, DuckDB's spelling else.

    >>> [readable(x) for x in (1 / 3, 0.1 + 0.2, 2.0, 123456789.123456, 1e-7, 2.5e20, -0.0001234567891)]
    ['0.3333333', '0.3', '2.0', '123456789.1', '1e-07', '2.5e+20', '-0.0001234568']
    """
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == int(value) and abs(value) < 1e15:
        return repr(float(value))  # 2.0, as DuckDB prints it
    magnitude = math.floor(math.log10(abs(value)))
    if -5 <= magnitude < 15:
        text = f"{value:.{max(1, SIGNIFICANT - 1 - magnitude)}f}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    mantissa, _, exponent = f"{value:.{SIGNIFICANT - 1}e}".partition("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{exponent}"


def text(value: Any, exact: bool = False) -> str:
    """A value as DuckDB's shell writes it (NULL, true/false, [a, b], {'k': v}); doubles readable unless ``exact``."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if exact else readable(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(text(v, exact) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"'{k}': {text(v, exact)}" for k, v in value.items()) + "}"
    return str(value)


def is_numeric(type_name: str | None) -> bool:
    return type_name is not None and (type_name in NUMERIC_TYPES or type_name.startswith("DECIMAL"))


def render(result: Result, mode: str = "box", max_width: int | None = None) -> str:
    """The result as text in ``mode`` (lines joined, no final newline); a box wider than ``max_width``
    characters leaves middle columns out."""
    mode = check_mode(mode)
    if mode == "box":
        return _box(result, max_width)
    return {"line": _line, "csv": _csv, "json": _json, "markdown": _markdown}[mode](result)


def _all_rows(result: Result) -> list[tuple]:
    return [*result.rows, *result.last]


def _centered(cell: str, width: int) -> str:
    """As DuckDB centers a name: an odd space goes to the right."""
    left = (width - len(cell)) // 2
    return " " * left + cell + " " * (width - len(cell) - left)


def _escaped(cell: str) -> str:
    return cell.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def _box(result: Result, max_width: int | None = None) -> str:
    types = result.types or [None] * len(result.columns)

    def cells(row: Sequence[Any]) -> list[list[str]]:  # each cell as its lines
        out = []
        for value in row:
            cell = _escaped(text(value))
            if result.wrap is not None:
                out.append(textwrap.wrap(cell, result.wrap) if len(cell) > result.wrap else [cell])
            else:
                out.append([cell if len(cell) <= MAX_CELL else cell[: MAX_CELL - 1] + "…"])
        return out

    header = [[name] for name in result.columns]
    type_row = [[TYPE_NAMES.get(t, t.strip('"').lower())] for t in types] if result.types and result.show_types else []
    top, bottom = [cells(r) for r in result.rows], [cells(r) for r in result.last]
    table = [header, *([type_row] if type_row else []), *top, *bottom]
    widths = [max(len(line) for row in table for line in row[i]) for i in range(len(header))]
    kept = _fitting(widths, max_width)
    aligns = [">" if is_numeric(t) else "<" for t in types]
    if kept is not None:  # the middle columns left out, as DuckDB does on a narrow terminal
        widths = [widths[i] if i >= 0 else 1 for i in kept]
        aligns = [aligns[i] if i >= 0 else "^" for i in kept]
        header, top, bottom = (
            [[r[i] if i >= 0 else ["…"] for i in kept] for r in rows] for rows in ([header], top, bottom)
        )
        header = header[0]
        type_row = [type_row[i] if i >= 0 else ["…"] for i in kept] if type_row else []

    def rule(left: str, middle: str, end: str) -> str:
        return left + middle.join("─" * (w + 2) for w in widths) + end

    def physical(row: list[list[str]], align: Sequence[str]) -> list[str]:
        lines = []
        for k in range(max(len(c) for c in row)):
            pieces = [(cell[k] if k < len(cell) else "", w, how) for cell, w, how in zip(row, widths, align)]
            lines.append("│" + "│".join(f" {_aligned(piece, w, how)} " for piece, w, how in pieces) + "│")
        return lines

    lines = [rule("┌", "┬", "┐"), *physical(header, "^" * len(widths))]
    lines += physical(type_row, "^" * len(widths)) if type_row else []
    lines.append(rule("├", "┼", "┤"))
    for row in top:
        lines += physical(row, aligns)
    if bottom:
        for _ in range(3):  # DuckDB's three dotted rows where rows are left out
            lines += physical([["·"]] * len(widths), aligns)
        for row in bottom:
            lines += physical(row, aligns)
    lines.append(rule("└", "┴", "┘"))
    return "\n".join(lines + _footer(result, len(lines[0]), kept))


def _aligned(piece: str, width: int, how: str) -> str:
    if how == "^":
        return _centered(piece, width)
    return piece.ljust(width) if how == "<" else piece.rjust(width)


ELIDED = -1  # the "…" column that stands for the columns left out


def _fitting(widths: list[int], max_width: int | None) -> list[int] | None:
    """The columns a box of ``max_width`` characters shows (ELIDED for the "…" between them), taken from the
    left and the right in turn; None when all fit."""
    if max_width is None or sum(w + 3 for w in widths) + 1 <= max_width:
        return None
    budget = max_width - 1 - 4  # the box's left edge and the "…" column
    left, right, take_left = 0, len(widths) - 1, True
    kept_left: list[int] = []
    kept_right: list[int] = []
    while left <= right:
        i = left if take_left else right
        if widths[i] + 3 > budget and (kept_left or kept_right):
            break
        budget -= widths[i] + 3
        if take_left:
            kept_left.append(i)
            left += 1
        else:
            kept_right.insert(0, i)
            right -= 1
        take_left = not take_left
    return [*kept_left, ELIDED, *kept_right]


def _footer(result: Result, width: int, kept: list[int] | None) -> list[str]:
    """DuckDB's line under a box that leaves rows or columns out: "336776 rows (40 shown)  19 columns (8 shown)"."""
    shown = len(result.rows) + len(result.last)
    if shown == result.total and result.total != 0 and kept is None:
        return []
    rows = f"{result.total} rows" + (f" ({shown} shown)" if shown < result.total else "")
    count = len(result.columns)
    columns = f"{count} column" + ("s" if count != 1 else "") + (f" ({len(kept) - 1} shown)" if kept else "")
    return ["  " + rows + columns.rjust(max(width - len(rows) - 4, len(columns) + 2))]


def _line(result: Result) -> str:
    if result.pairs:
        width = max((len(str(row[0])) for row in _all_rows(result)), default=0)
        return "\n".join(f"{str(k).rjust(width)} = {text(v)}" for k, v in _all_rows(result))
    width = max((len(c) for c in result.columns), default=0)
    blocks = [
        "\n".join(f"{c.rjust(width)} = {text(v)}" for c, v in zip(result.columns, row)) for row in _all_rows(result)
    ]
    return "\n\n".join(blocks)


def _csv(result: Result) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(result.columns)
    for row in _all_rows(result):
        writer.writerow(["" if v is None else text(v, exact=True) for v in row])
    return buffer.getvalue().rstrip("\n")


def json_value(value: Any) -> Any:
    """A value as JSON holds it: NaN and infinities as null (as DuckDB's json mode), others as strings."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    return str(value)


def _json(result: Result) -> str:
    types = result.types or [None] * len(result.columns)

    def value(v: Any, type_name: str | None) -> Any:
        if type_name == "JSON" and isinstance(v, str):
            try:
                return json.loads(v)  # a JSON column is embedded as JSON, not as a string of it
            except ValueError:
                return v
        return json_value(v)

    rows = [json.dumps({c: value(v, t) for c, v, t in zip(result.columns, row, types)}) for row in _all_rows(result)]
    return "[" + ",\n".join(rows) + "]" if rows else "[]"


def _markdown(result: Result) -> str:
    types = result.types or [None] * len(result.columns)
    rows = [[_escaped(text(v)).replace("|", "\\|") for v in row] for row in _all_rows(result)]
    widths = [max([len(c), 3] + [len(r[i]) for r in rows]) for i, c in enumerate(result.columns)]
    lines = ["| " + " | ".join(_centered(c, w) for c, w in zip(result.columns, widths)) + " |"]
    lines.append(
        "|" + "|".join(("-" * (w + 1) + ":") if is_numeric(t) else "-" * (w + 2) for w, t in zip(widths, types)) + "|"
    )
    for row in rows:
        cells = [c.rjust(w) if is_numeric(t) else c.ljust(w) for c, w, t in zip(row, widths, types)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def limited(rows: Iterable[tuple], maxrows: int | None) -> tuple[list[tuple], list[tuple], int]:
    """The first and last rows to show of ``rows`` under ``maxrows``, and how many there were.

    DuckDB's rule: the first half (rounded up) and the last half, but every row when there are at most 3
    more than ``maxrows`` (the dots take 3 lines). Only the rows that may be shown are kept.
    """
    if maxrows is None:
        everything = list(rows)
        return everything, [], len(everything)
    head: list[tuple] = []
    tail: deque[tuple] = deque(maxlen=maxrows)
    total = 0
    for row in rows:
        total += 1
        if len(head) < maxrows + 3:
            head.append(row)
        else:
            tail.append(row)
    if total <= maxrows + 3:
        return head, [], total
    top, bottom = (maxrows + 1) // 2, maxrows // 2
    after = head[top:] + list(tail)
    return head[:top], after[len(after) - bottom :] if bottom else [], total


def result_of(cursor: Any, maxrows: int | None, chunk: int = 10_000) -> Result:
    """The rows of a DuckDB cursor to show, read in chunks (only the shown ones are kept)."""

    def rows() -> Iterable[tuple]:
        while batch := cursor.fetchmany(chunk):
            yield from batch

    columns = [d[0] for d in cursor.description]
    types = [str(d[1]) for d in cursor.description]
    top, bottom, total = limited(rows(), maxrows)
    return Result(columns, types, top, bottom, total)
