"""The JSON that ilargi_db's SQL functions return, as short tables a person reads.

``ilargi_train`` returns a summary of some 1 KB, ``ilargi_explain`` one of 5 KB (both plans step by step);
the shell and the ``ilargi`` command print the lines that matter (strategy, rows, metrics, seconds,
warnings, the first reasons) as a two-column table, and the whole JSON in ``.mode json`` or with ``--json``.
A result is a summary when it is one value of one column named after the call (``ilargi_train(...)``,
DuckDB's default name), or aliased but with the summary's keys. ``ilargi_cross_validate`` returns a table:
a result with its columns is shown as it is, its long cells (every fold's score) folded rather than cut.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ilargi_db.shell.render import MAX_CELL, Result, readable

WRAP = 80  # a longer value is folded onto more lines in box mode
REASONS_SHOWN = 3  # of ilargi_explain's reasons; the rest are in its JSON
# The keys by which an aliased result is known (a summary has at least these).
SIGNATURES = {
    "ilargi_train": {"name", "version", "algorithm", "strategy", "metrics", "macros"},
    "ilargi_explain": {"strategy", "predicted_seconds", "plan", "reasons"},
    "ilargi_evaluate": {"name", "version", "metrics"},
    "ilargi_drop_model": {"dropped", "versions"},
}
BATCH = "ilargi_train_batch"
# The columns of ilargi_cross_validate's table, as it documents them (a result with all of them is its).
CROSS_VALIDATION = ("params", "rank", "mean_score", "std_score", "fold_scores", "fit_seconds")


def number(value: Any) -> str:
    """A metric or count: integers with thousands separators, doubles readable, null as NULL."""
    if isinstance(value, bool) or value is None:
        return "NULL" if value is None else str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return readable(value)
    return str(value)


def seconds(value: float) -> str:
    return f"{value:.3g} s"


def metrics_line(metrics: dict) -> str:
    """``{"r2": 0.845, "rmse": 17.88}`` as "r2 0.845, rmse 17.88"."""
    return ", ".join(f"{k} {number(v)}" for k, v in metrics.items())


def summary_kind(column: str, type_name: str | None, value: Any) -> str | None:
    """Which function's summary a one-value result is (its name), or None for any other value."""
    named = column.split("(", 1)[0].strip().lower() if "(" in column else None
    if named in (*SIGNATURES, BATCH):
        return named
    if type_name != "JSON" or not isinstance(value, str):
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    if isinstance(parsed, list) and parsed and all(_is(d, "ilargi_train") for d in parsed):
        return BATCH
    kinds = [kind for kind in SIGNATURES if _is(parsed, kind)]
    return kinds[0] if len(kinds) == 1 else None


def _is(value: Any, kind: str) -> bool:
    if not isinstance(value, dict) or not SIGNATURES[kind] <= value.keys():
        return False
    return kind != "ilargi_evaluate" or value.keys() == SIGNATURES[kind]


def summarize(kind: str, value: Any) -> Result | None:
    """The summary of ``kind`` (a function's name) as a table: field and value, or one row per model.

    None when ``value`` is not shaped as this version knows the summary (a newer or edited one): the caller
    shows it as it is rather than guess.
    """
    try:
        if kind == BATCH:
            return _batch(value)
        rows = SUMMARIES[kind](value)
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    return Result([kind, "result"], None, [(k, v) for k, v in rows], wrap=WRAP, pairs=True)


def _train(s: dict) -> list[tuple[str, str]]:
    how = s["strategy"] + (f", solver {s['solver']}" if s.get("solver") else "")
    how += f", objective {s['objective']}" if s.get("objective") else ""
    rows = f"{number(s['rows'])} ({s['features']} features, {number(s['columns'])} model columns)"
    if s.get("unlabelled_rows_left_out"):
        rows += f"; {number(s['unlabelled_rows_left_out'])} with a NULL target left out"
    times = dict(s.get("seconds") or {})
    total = times.pop("total", None)
    spent = ", ".join(f"{k} {v:.3g}" for k, v in times.items())
    lines = [
        ("model", f"{s['name']} version {s['version']} ({s['algorithm']})"),
        ("strategy", how),
        ("why", str(s.get("why", "")).split("; ")[0]),  # the decision; the rest is in the JSON
        ("rows", rows),
        *((k, number(v)) for k, v in (s.get("metrics") or {}).items()),
        ("seconds", (seconds(total) if total is not None else "") + (f" ({spent})" if spent else "")),
        ("macros", ", ".join(s.get("macros") or []) or "(none: score it with ilargi_db.predict)"),
        *(("warning", str(w)) for w in s.get("warnings") or []),
    ]
    return lines + _others(s, set(SHOWN_TRAIN))


SHOWN_TRAIN = (
    "name version algorithm strategy solver solver_why objective why rows features columns metrics seconds macros "
    "unlabelled_rows_left_out warnings"
).split()


def _others(summary: dict, shown: set[str]) -> list[tuple[str, str]]:
    """Keys of a summary this table does not know (added later), when short: nothing is hidden silently."""
    others = []
    for key, value in summary.items():
        shown_as = value if isinstance(value, str) else json.dumps(value)
        if key not in shown and len(shown_as) <= WRAP:
            others.append((key, shown_as))
    return others


def _explain(e: dict) -> list[tuple[str, str]]:
    plan = e.get("plan") or {}
    label = plan.get("label", e["strategy"])
    predicted = ", ".join(f"{k} {seconds(v)}" for k, v in (e.get("predicted_seconds") or {}).items() if v is not None)
    lines = [
        ("strategy", e["strategy"] + (f", solver {e['solver']}" if e.get("solver") else "")),
        ("predicted", predicted),
    ]
    confidence = e.get("confidence") or {}
    fastest = (confidence.get("probability_fastest") or {}).get(label)
    regret = (confidence.get("expected_regret") or {}).get(label)
    if fastest is not None and regret is not None:
        lines.append(
            ("how sure", f"fastest in {fastest:.0%} of the cost model's error draws, expected regret {regret:.1%}")
        )
    reasons = e.get("reasons") or []
    lines += [("why", str(r)) for r in reasons[:REASONS_SHOWN]]
    if len(reasons) > REASONS_SHOWN:
        lines.append(("more", f"{len(reasons) - REASONS_SHOWN} more reasons and both plans step by step in the JSON"))
    if e.get("model"):
        lines.append(("kernel costs", str(e["model"])))
    return lines


def _evaluate(v: dict) -> list[tuple[str, str]]:
    metrics = dict(v["metrics"])
    unlabelled = metrics.pop("unlabelled_rows_left_out", 0)
    lines = [("model", f"{v['name']} version {v['version']}"), *((k, number(m)) for k, m in metrics.items())]
    if unlabelled:
        lines.append(("left out", f"{number(unlabelled)} rows with a NULL target"))
    return lines


def _drop(d: dict) -> list[tuple[str, str]]:
    versions = d["versions"]
    return [("dropped", f"{d['dropped']}: {versions} version{'s' if versions != 1 else ''} and its macros")]


SUMMARIES: dict[str, Callable[[dict], list[tuple[str, str]]]] = {
    "ilargi_train": _train,
    "ilargi_explain": _explain,
    "ilargi_evaluate": _evaluate,
    "ilargi_drop_model": _drop,
}


def _batch(summaries: list) -> Result:
    columns = ["name", "version", "algorithm", "strategy", "metrics", "seconds", "warnings"]
    rows = [
        (
            s["name"],
            s["version"],
            s["algorithm"],
            s["strategy"],
            metrics_line(s.get("metrics") or {}),
            seconds((s.get("seconds") or {}).get("total", 0.0)),
            len(s.get("warnings") or []),
        )
        for s in summaries
    ]
    types = ["VARCHAR", "INTEGER", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "INTEGER"]
    return Result(columns, types, rows, wrap=WRAP, show_types=False)


def scores_table(result: Result) -> Result:
    """``result`` as shown: ilargi_cross_validate's table (or a selection of it with its columns) with its long
    cells folded onto more lines (ten folds' scores are longer than a cut cell), any other result as it is."""
    if not set(CROSS_VALIDATION) <= set(result.columns) or result.wrap is not None:
        return result
    return replace(result, wrap=MAX_CELL)
