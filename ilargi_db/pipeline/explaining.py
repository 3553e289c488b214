"""``explain``: the plan phase alone, in words; it never reads the data, never trains, never writes."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import duckdb

from ilargi_db.backend import get_backend
from ilargi_db.cost_model.explain import Explanation, explain_graph
from ilargi_db.errors import IlargiError
from ilargi_db.interruption import interruptible_job
from ilargi_db.models.catalog import AUTO, Placement, algorithm_facts, make_estimator
from ilargi_db.pipeline.options import check_validation, is_share
from ilargi_db.pipeline.placement import check_streamable, placed_choice, stream_plan
from ilargi_db.pipeline.planning import counted_stats, plan_graph, stored_stats
from ilargi_db.pipeline.validation import check_validation_query
from ilargi_db.read_snapshot import ReadSnapshot
from ilargi_db.reuse.job import JobReuse


@interruptible_job
def explain(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None = None,
    algorithm: str = "linear_regression",
    backend: str = "auto",
    *,
    reuse: bool | str = True,
    memory_budget: int | str | None = None,
    standardize: bool = False,
    group_by: str | None = None,
    validation: float | str | None = None,
    **params: Any,
) -> Explanation:
    """The plan ``train(..., strategy="auto")`` would run, the runner-up, their predicted seconds per step, and why.

    The plan phase alone (:mod:`ilargi_db.cost_model` prices the plans). With ``reuse`` (the default) it
    says what the artifact store holds for the job and prices the factorized plans with it, as ``train``
    does: it fingerprints the columns the job reads (one aggregate query) to know. It also says when the
    job's data exceed ``memory_budget`` (as for :func:`train`) and would stream; ``standardize`` as for
    :func:`train`. Never trains, never writes.

    Examples
    --------
    >>> import ilargi_db
    >>> con = ilargi_db.connect()
    >>> _ = con.sql("CREATE TABLE t AS SELECT range * 1.0 AS x, range % 5 * 1.0 AS z, 3.0 * range AS y FROM range(40)")
    >>> _ = ilargi_db.train(con, "SELECT x, z, y FROM t", "y", strategy="factorized", backend="numpy")
    >>> e = ilargi_db.explain(con, "SELECT x, z, y FROM t", "y", backend="numpy")
    >>> any("reuses the encoded matrix" in r for r in e.reasons)
    True
    """
    make_estimator(algorithm, params)  # an unknown algorithm or parameter fails before the query is planned
    check_validation(validation)
    with ReadSnapshot(con):  # every read sees one committed state of the database
        graph, flags = plan_graph(con, query, target, group_by)  # as train plans it: the same checks, the same graph
        check_validation_query(con, graph, validation)
        job = JobReuse.open(con, graph, flags, enabled=reuse)
        began = time.perf_counter()
        stats = stored_stats(job)
        if stats is None:  # counted once, for the plans and the stream check; counting is part of deciding
            stats = counted_stats(con, graph)
        spent = time.perf_counter() - began if stats is not None else 0.0
        held = job.holdings(graph, job.matrix_key(graph, flags, True, get_backend(backend).name))
        explanation = explain_graph(
            con, graph, algorithm, backend, params, stats=stats, spent=spent, reuse=held, standardize=standardize
        )
        if is_share(validation):  # held out by the rows' values: any strategy's read holds out the same rows
            explanation.reasons.append(
                f"validation={float(validation):g}: train holds that share of the rows out, each row chosen by a hash "
                "of its values (the same rows on every run, whatever order the read delivers them in)"
            )
        if graph.group is not None:  # priced as one fit of all the rows: the groups' fits share them out
            explanation.reasons.append(
                f"one model per value of {graph.group.name}, each fitted on its rows of this one read (priced as "
                "one fit of all the rows); held in memory, never streamed"
            )
        try:
            streams = stream_plan(con, graph, explanation.strategy, stats, memory_budget)
        except IlargiError as err:
            if memory_budget is not None:
                explanation.reasons.append(f"over the memory budget and cannot stream: {err}")
            streams = None
        if streams is not None and (graph.group is not None or is_share(validation)):
            explanation.reasons.append(
                f"over the memory budget ({streams.why}): group_by and a validation share hold the rows in memory, "
                "so train would refuse it"
            )
            streams = None
        try:
            if streams is not None:
                check_streamable(graph, Placement.STREAMED)  # as train refuses it (a sample, random())
        except IlargiError as err:
            explanation.reasons.append(f"over the memory budget and cannot stream: {err}")
            streams = None
        if streams is not None:
            parameter = algorithm_facts(algorithm).solver_parameter
            choose = parameter is not None and params.get(parameter, AUTO) == AUTO
            streamed, chose = placed_choice(explanation, explanation.plan, streams, 1, choose)
            predicted = ""
            if streamed is not None and streamed.placement == Placement.STREAMED:
                explanation = replace(explanation, placed=streamed)
                predicted = f"; {streamed.seconds:.3g} s predicted streamed ({streamed.label})"
                predicted += f"; {chose}" if chose else ""
            explanation.reasons.append(f"would stream: {streams.why}; {streams.spill_why}{predicted}")
        return explanation
