"""A small sqllogictest runner for ilargi_db's SQL contract (``sql/test/*.test``).

Records, separated by blank lines (DuckDB's dialect of the format):

- ``statement ok`` / ``statement error`` followed by SQL; an error record may
  add ``----`` and the text the error message must contain.
- ``query <types> [rowsort]`` followed by SQL, ``----`` and the expected rows,
  tab-separated; ``NULL`` and ``(empty)`` spelled out, floats as Python prints them.
- ``require ilargi_db``: install ilargi_db's functions on the connection (a
  test starts from a plain DuckDB connection, as an extension's does).
- ``load <path>``: reopen on a database file (``__TEST_DIR__``, here and in
  SQL, is a fresh temporary directory); ``restart``: reconnect to it with plain DuckDB.
- ``# ...`` lines are comments.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

import ilargi_db


@dataclass
class Record:
    kind: str  # statement | query | require | load | restart
    line: int
    argument: str = ""  # "ok"/"error", query types, module, path
    sql: str = ""
    expected: list[str] | None = None
    sort: bool = False


def _chunks(text: str) -> list[tuple[int, list[str]]]:
    """Blank-line separated groups of lines, with the line number each starts on."""
    chunks, current, start = [], [], 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.strip():
            if not current:
                start = number
            current.append(raw)
        elif current:
            chunks.append((start, current))
            current = []
    if current:
        chunks.append((start, current))
    return chunks


def parse(text: str) -> list[Record]:
    records = []
    for start, chunk in _chunks(text):
        lines = [raw for raw in chunk if not raw.startswith("#")]
        if not lines:
            continue
        head, body = lines[0].split(), lines[1:]
        expected = None
        if "----" in body:
            cut = body.index("----")
            body, expected = body[:cut], body[cut + 1 :]
        kind = head[0]
        if kind not in ("statement", "query", "require", "load", "restart"):
            raise ValueError(f"line {start}: unknown record {lines[0]!r}")
        records.append(
            Record(
                kind=kind,
                line=start,
                argument=head[1] if len(head) > 1 else "",
                sql="\n".join(body),
                expected=expected,
                sort="rowsort" in head[2:],
            )
        )
    return records


def render(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return "(empty)"
    return str(value)


class Runner:
    def __init__(self, test_dir: Path):
        self.test_dir = test_dir
        self.path = ":memory:"
        self.con = duckdb.connect()

    def close(self) -> None:
        self.con.close()

    def reopen(self) -> None:
        self.con.close()
        self.con = duckdb.connect(self.path)

    def run(self, record: Record, where: str) -> None:
        record.sql = record.sql.replace("__TEST_DIR__", str(self.test_dir))  # as DuckDB's runner does
        if record.kind == "require":
            assert record.argument == "ilargi_db", f"{where}: only ilargi_db can be required"
            ilargi_db.install(self.con)
        elif record.kind == "load":
            self.path = record.argument.replace("__TEST_DIR__", str(self.test_dir))
            self.reopen()
        elif record.kind == "restart":
            self.reopen()
        elif record.kind == "statement" and record.argument == "ok":
            try:
                self.con.execute(record.sql)
            except duckdb.Error as err:
                raise AssertionError(f"{where}: statement failed: {err}\n{record.sql}") from None
        elif record.kind == "statement":
            try:
                self.con.execute(record.sql)
            except duckdb.Error as err:
                message = "\n".join(record.expected or [])
                assert message in str(err), f"{where}: expected an error with\n{message}\ngot\n{err}"
                return
            raise AssertionError(f"{where}: statement should have failed:\n{record.sql}")
        else:
            try:
                result = self.con.execute(record.sql).fetchall()
            except duckdb.Error as err:
                raise AssertionError(f"{where}: query failed: {err}\n{record.sql}") from None
            rows = ["\t".join(render(v) for v in row) for row in result]
            for row in result:
                assert len(row) == len(record.argument), f"{where}: query {record.argument} returned {len(row)} columns"
            if record.sort:
                rows = sorted(rows)
            expected = record.expected or []
            assert rows == expected, f"{where}: expected\n" + "\n".join(expected) + "\ngot\n" + "\n".join(rows)
