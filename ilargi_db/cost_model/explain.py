"""``explain``: which strategy ``train(strategy="auto")`` picks for a query, the predicted times, and why."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from typing import Any

import duckdb

from ilargi_db.algorithms import make_estimator
from ilargi_db.errors import IlargiError
from ilargi_db.cost_model import analytical, learned
from ilargi_db.cost_model.analytical import STRATEGIES
from ilargi_db.cost_model.calibration import calibration_path
from ilargi_db.cost_model.features import job_features, job_stats
from ilargi_db.cost_model.hardware import Hardware, detect_hardware
from ilargi_db.cost_model.memory import array_bytes, format_bytes, memory_limit_bytes
from ilargi_db.interruption import interruptible_job
from ilargi_db.plan import JoinGraph, build_join_graph
from ilargi_db.preprocess import categorical_flags, mark_categorical_coalesce
from ilargi_db.read_snapshot import ReadSnapshot


@dataclass(frozen=True)
class Explanation:
    """The cost estimator's decision for one training job.

    Attributes
    ----------
    strategy : {"factorized", "materialized"}
    predicted_seconds : dict
        Predicted end-to-end ``train`` seconds per strategy. A job that cannot
        be factorized (a feature mixes sources) has only ``"materialized"``.
    features : dict
        The job's features (JSON-serialisable scalars).
    reasons : list of str
        The top reasons, in plain words, most important first.
    model : str
        Which model decided.
    """

    strategy: str
    predicted_seconds: dict[str, float]
    features: dict[str, float | int | str]
    reasons: list[str]
    model: str

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        times = ", ".join(f"{s} {t:.3g} s" for s, t in self.predicted_seconds.items())
        lines = [f"strategy: {self.strategy} (predicted {times})", f"model: {self.model}", "why:"]
        lines += [f"  - {r}" for r in self.reasons]
        return "\n".join(lines)


def prepare_graph(con: duckdb.DuckDBPyConnection, query: str, target: str | None) -> JoinGraph:
    """The join graph ``train`` would plan (a categorical COALESCE across sources counts as cross-source)."""
    graph = build_join_graph(con, query, target)
    if not graph.features:
        raise IlargiError("the training query selects no feature column: add the columns to learn from.")
    return mark_categorical_coalesce(graph, categorical_flags(graph))


def _check(algorithm: str, params: dict) -> None:
    make_estimator(algorithm, params)  # an unknown algorithm or parameter fails here; builds, never fits


def job_features_for(
    con: duckdb.DuckDBPyConnection, query: str, target: str | None, algorithm: str, params: dict
) -> dict[str, float | int | str]:
    """The shape features of a job (no hardware), as calibration stores them."""
    return job_features(job_stats(con, prepare_graph(con, query, target)), algorithm, params)


def select_model(backend: str, cache: str | os.PathLike | None = None) -> learned.CostModel:
    """This machine's calibration of ``backend`` if there is one; else the shipped model (CPU) or the roofline."""
    path = calibration_path(backend, cache)
    if path.exists():
        return learned.load_model(path, cache=cache)
    if backend == "numpy":
        return learned.load_model(cache=cache)
    return learned.analytical_model()  # a GPU never calibrated: CPU timings would mislead


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.2g}"


def _reasons(
    f: dict, phases: dict, predicted: dict, hardware: Hardware, backend: str, chosen: str | None = None
) -> list[str]:
    """Plain-words reasons, weighted by how much each moves the log-ratio of the two predictions.

    Reasons that favour ``chosen`` come first, so the lead reason never argues for the other strategy.
    """
    weighted: list[tuple[float, str, str | None]] = []  # (weight, text, the strategy it favours)
    comp = float(f["comp_ratio"])
    if f["n_dimensions"]:
        low, high = _fmt(f["tuple_ratio_min"]), _fmt(f["tuple_ratio_max"])
        times = low if low == high else f"{low} to {high}"
        where = (
            f"the join repeats each dimension row {times} times (tuple ratio) and the dimensions bring "
            f"{_fmt(f['feature_ratio'])}x the fact's columns (feature ratio)"
        )
        if comp > 1.5:
            text = (
                f"{where}: the joined matrix would hold {_fmt(f['cells_materialized'])} cells, "
                f"{comp:.1f}x the {_fmt(f['cells_factorized'])} of the sources plus their row indices"
            )
        else:
            text = (
                f"{where}: the joined matrix ({_fmt(f['cells_materialized'])} cells) is no bigger than the sources "
                f"plus their row indices ({_fmt(f['cells_factorized'])}), so factorizing saves little work"
            )
        weighted.append((abs(math.log(max(comp, 1e-9))), text, "factorized" if comp > 1.5 else "materialized"))
    for phase, words in (("data", "joins and data transfers out of DuckDB"), ("iterations", "the training iterations")):
        fa, ma = phases["factorized"][phase], phases["materialized"][phase]
        if fa + ma <= 0:
            continue
        weight = abs(fa - ma) / max(predicted["factorized"]["analytical"], predicted["materialized"]["analytical"])
        fa_ms, ma_ms = _fmt(fa * 1e3), _fmt(ma * 1e3)
        tie = fa_ms == ma_ms or abs(fa - ma) <= 0.1 * max(fa, ma)  # within the model's own error
        if tie:
            text = f"{words} take about {_fmt(max(fa, ma) * 1e3)} ms either way (roofline)"
        else:
            text = f"{words} take about {fa_ms} ms factorized vs {ma_ms} ms materialized (roofline)"
        if phase == "iterations":
            n_iter = f["iterations"]
            text += f" over {n_iter:g} expected {'pass' if n_iter == 1 else 'iterations'} of {f['algorithm']}"
        faster = None if tie else "factorized" if fa < ma else "materialized"
        weighted.append((weight * 2, f"{text}: {faster} wins there" if faster else text, faster))
    if f["fact_fanout"] > 1.2:  # HyperLogLog counts are within a few percent
        fanout = _fmt(f["fact_fanout"])
        weighted.append((0.5, f"an M:N join repeats fact rows {fanout}x: the join outgrows its sources", "factorized"))
    if f["categorical_features"]:
        weighted.append(
            (
                0.3,
                f"{f['categorical_features']} categorical feature(s) one-hot encoded into {f['columns_onehot']} "
                "columns: materializing encodes one value per joined row, factorizing one per source row",
                "factorized",
            )
        )
    cf, cm = predicted["factorized"]["correction"], predicted["materialized"]["correction"]
    if abs(math.log(cf / cm)) > 0.05:
        who = "factorized" if cf < cm else "materialized"
        weighted.append(
            (
                abs(math.log(cf / cm)),
                f"measured jobs like this one ran {who} {max(cf / cm, cm / cf):.1f}x better than the roofline "
                "alone predicts (the calibration's correction)",
                who,
            )
        )
    if chosen is not None and not any(favours == chosen for _, _, favours in weighted):
        work = max(phases[s]["data"] + phases[s]["iterations"] for s in STRATEGIES)
        weighted.append(
            (
                float("inf"),
                f"little work either way (the roofline puts it under {_fmt(work * 1e3)} ms): fixed costs (planning, "
                f"query start-up, Python) make up most of the time, and measured jobs of this size ran {chosen} faster",
                chosen,
            )
        )
    weighted.sort(key=lambda wr: (wr[2] != chosen, -wr[0]))  # for the choice first, then the heaviest
    reasons = [r for _, r, _ in weighted[:4]]
    gpu = f", GPU {hardware.gpu_name}" if backend == "cupy" and hardware.gpu_name else ""
    reasons.append(
        f"hardware: {hardware.cores} cores, {hardware.memory_bandwidth_gbs:.0f} GB/s memory, "
        f"{hardware.gflops:.0f} GFLOP/s{gpu}; backend {backend}"
    )
    return reasons


def explain_graph(
    con: duckdb.DuckDBPyConnection,
    graph: JoinGraph,
    algorithm: str = "linear_regression",
    backend: str = "auto",
    params: dict[str, Any] | None = None,
    cache: str | os.PathLike | None = None,
) -> Explanation:
    """:func:`explain` for a planned join graph (what ``train`` calls)."""
    from ilargi_db.backend import get_backend

    params = dict(params or {})
    _check(algorithm, params)
    name = get_backend(backend).name
    hardware = detect_hardware(cache)
    stats = job_stats(con, graph)
    f = job_features(stats, algorithm, params)
    f.update(backend=name, **hardware.as_features())
    model = select_model(name, cache)
    predicted = model.predict(f, hardware, name)
    phases = {s: analytical.breakdown(f, s, hardware, name) for s in STRATEGIES}
    for s in STRATEGIES:
        w = analytical.work(f, s)
        f[f"flops_per_iteration_{s}"] = w["flops_per_iteration"]
        f[f"bytes_per_iteration_{s}"] = w["bytes_per_iteration"]
        f[f"data_bytes_{s}"] = w["data_bytes"]
        f[f"analytical_seconds_{s}"] = predicted[s]["analytical"]
    seconds = {s: float(predicted[s]["seconds"]) for s in STRATEGIES}
    needed = array_bytes(stats)
    limit = memory_limit_bytes(con)
    for s in STRATEGIES:
        f[f"array_bytes_{s}"] = needed[s]
    fits = {s: limit is None or needed[s] <= limit for s in STRATEGIES}
    chosen = min(STRATEGIES, key=lambda s: (not fits[s], seconds[s]))  # the fastest of those that fit
    reasons = _reasons(f, phases, predicted, hardware, name, chosen)
    mixed = graph.cross_source_features
    if mixed:
        why = "; ".join(feature.describe_sources() for feature in mixed)
        only = f"{why}, so it cannot be computed inside one source: only the materialized join can train it"
        reasons = [only, reasons[-1]]  # and the hardware line
        return Explanation("materialized", {"materialized": seconds["materialized"]}, f, reasons, model.description)
    other = "materialized" if chosen == "factorized" else "factorized"
    speedup = seconds[other] / seconds[chosen]
    lead = f"{chosen} is predicted {speedup:.2f}x faster"
    if speedup < 1.1:
        lead += " (a near tie: either strategy costs about the same)"
    if fits[chosen] and not fits[other]:
        lead = (
            f"{other}'s arrays ({format_bytes(needed[other])}) would exceed DuckDB's memory_limit of "
            f"{format_bytes(limit)}, {chosen}'s ({format_bytes(needed[chosen])}) fit"
        ) + ("" if speedup >= 1 else f", though {other} is predicted {1 / speedup:.2f}x faster")
    return Explanation(chosen, seconds, f, [f"{lead}: {reasons[0]}", *reasons[1:]], model.description)


@interruptible_job
def explain(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None = None,
    algorithm: str = "linear_regression",
    backend: str = "auto",
    **params: Any,
) -> Explanation:
    """Which strategy ``train(..., strategy="auto")`` would pick, the predicted seconds of both, and why.

    Runs two aggregate queries (row counts, and the join's size and fan-outs);
    never reads a feature block, never trains, never writes to the database.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
    query : str
        The training query, as for :func:`ilargi_db.train`.
    target : str or None
        The label column for supervised algorithms.
    algorithm : {"linear_regression", "logistic_regression", "kmeans", "gnmf"}
    backend : {"auto", "numpy", "cupy"}
    **params
        The algorithm's parameters (``max_iter``, ``n_clusters``, ...): they set the expected iterations.

    Returns
    -------
    Explanation

    Examples
    --------
    >>> import duckdb, ilargi_db
    >>> con = duckdb.connect()
    >>> _ = con.sql("CREATE TABLE f AS SELECT range % 100 AS k, random() AS x, random() AS y FROM range(200000)")
    >>> _ = con.sql("CREATE TABLE d AS SELECT range AS k, " + ", ".join(f"random() AS z{j}" for j in range(20))
    ...             + " FROM range(100)")
    >>> e = ilargi_db.explain(con, "SELECT f.x, d.*, f.y FROM f JOIN d USING (k)", target="y", backend="numpy")
    >>> e.strategy, sorted(e.predicted_seconds), e.features["tuple_ratio"]
    ('factorized', ['factorized', 'materialized'], 2000.0)
    """
    _check(algorithm, params)  # before the query is planned
    with ReadSnapshot(con):  # every read sees one committed state of the database
        graph = prepare_graph(con, query, target)
        return explain_graph(con, graph, algorithm, backend, params)
