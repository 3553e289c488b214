"""The plan phase: the join graph once, its statistics, and the cost model's choice of strategy, solver and
placement as one typed value, :class:`JobPlan`, that the read and fit phases follow."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import duckdb

from ilargi_db.backend.namespace import Backend
from ilargi_db.cluster.connection import connect_cluster
from ilargi_db.cost_model.choose import choose_batch_strategy, plan_for
from ilargi_db.cost_model.explain import Explanation
from ilargi_db.cost_model.features import JobStats, job_stats
from ilargi_db.cost_model.memory import check_job_memory
from ilargi_db.cost_model.plan import PhysicalPlan
from ilargi_db.errors import IlargiError
from ilargi_db.models.catalog import AUTO, Placement, Rows, Strategy, algorithm_facts
from ilargi_db.pipeline.options import ModelSpec, TrainOptions
from ilargi_db.pipeline.placement import (
    StreamPlan,
    check_streamable,
    duckdb_memory_held,
    placed_choice,
    stream_plan,
)
from ilargi_db.pipeline.targets import check_text_target, with_target_classes
from ilargi_db.pipeline.validation import check_validation_query
from ilargi_db.plan import JoinGraph, build_join_graph, categorical_flags, check_target_type, mark_categorical_coalesce
from ilargi_db.read_snapshot import renew_snapshot
from ilargi_db.reuse.job import JobReuse


@dataclass(frozen=True)
class ModelPlan:
    """One model of the job as planned."""

    spec: ModelSpec
    estimator: Any  # its solver set to the plan's where the caller left it at "auto" (``solver_chosen``)
    plan: PhysicalPlan | None  # the cost model's plan, priced where it runs (None: no cost model ran)
    explanation: Explanation | None
    solver_chosen: bool = False


@dataclass(frozen=True)
class JobPlan:
    """Everything decided before the data are read: what to read, how, where, and which models fit it."""

    query: str
    target: str | None
    options: TrainOptions
    graph: JoinGraph
    flags: list[bool]  # per feature: categorical
    artifacts: JobReuse  # what the artifact store holds for the job, and keeps of it
    backend: Backend
    strategy: Strategy
    why: str  # the decision, in words (the models' ``decision_``)
    chosen_by: str  # who chose the strategy where the cost model gave no plan
    models: tuple[ModelPlan, ...]
    placement: Placement = Placement.MEMORY
    stream: StreamPlan | None = None  # with Placement.STREAMED
    client: Any = None  # the Dask client, with Placement.DISTRIBUTED

    @property
    def reads_bins(self) -> bool:
        """Whether the models are trees: they read each feature's bins, not a normalized matrix."""
        return reads_bins([m.spec for m in self.models])


def reads_bins(specs: Sequence[ModelSpec]) -> bool:
    """Whether ``specs`` are tree models (binned rows); a batch mixing them with others is refused."""
    kinds = {algorithm_facts(s.algorithm).reads for s in specs}
    if len(kinds) > 1:
        raise IlargiError(
            "a batch cannot mix tree models (gradient_boosting, random_forest) with the linear models, k-means or "
            "NMF: they read the rows differently (bins against one-hot columns); train them in two batches."
        )
    return kinds == {Rows.BINS}


def plan_graph(
    con: duckdb.DuckDBPyConnection, query: str, target: str | None, group_by: str | None = None
) -> tuple[JoinGraph, list[bool]]:
    """The training query's join graph (checked: features, the target's type) and its categorical flags."""
    graph = build_join_graph(con, query, target, group_by)
    if not graph.features:
        raise IlargiError("the training query selects no feature column: add the columns to learn from.")
    flags = categorical_flags(graph)
    check_target_type(graph)
    graph = with_target_classes(con, graph)  # a text target's labels: every read takes each row's class position
    return mark_categorical_coalesce(graph, flags), flags


def stored_stats(artifacts: JobReuse) -> JobStats | None:
    """The job's statistics from the artifact store (None if not stored, or stored damaged)."""
    found = artifacts.find_stats()
    try:
        return JobStats.from_dict(found) if found is not None else None
    except (KeyError, TypeError, ValueError):
        artifacts.unuse_last()
        return None


def counted_stats(con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> JobStats | None:
    """The job's statistics counted (two aggregate queries); None when counting fails, the snapshot renewed."""
    try:
        return job_stats(con, graph)
    except IlargiError:
        renew_snapshot(con)  # a failed statement aborts the job's read transaction
        return None


def job_statistics(con: duckdb.DuckDBPyConnection, graph: JoinGraph, artifacts: JobReuse) -> JobStats | None:
    """The cost model's statistics (also the memory check's and the stream plan's): from the store, or counted
    once (and kept there, with reuse on), so that no later step counts them again. None when counting fails
    (the cost model's fallback takes over: see choose_batch_strategy)."""
    stats = stored_stats(artifacts)
    if stats is not None:
        return stats
    began = time.perf_counter()
    stats = counted_stats(con, graph)
    if stats is not None:
        artifacts.keep_stats(stats.to_dict(), time.perf_counter() - began)  # kept only with reuse on
    return stats


def plan_job(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None,
    specs: Sequence[ModelSpec],
    estimators: Sequence[Any],
    options: TrainOptions,
    backend: Backend,
    cleanup: contextlib.ExitStack,
    check_graph: Callable[[JoinGraph], None] | None = None,
) -> JobPlan:
    """Plan the job: the graph, the statistics, the strategy and each model's solver, then the placement.

    ``check_graph`` sees the planned graph before anything else runs; ``cleanup`` closes what planning
    opens (a cluster client this call connected) when the job ends, or fails.
    """
    if reads_bins(specs) and options.cluster is not None:  # (a batch mixing trees with others is refused there)
        names = " and ".join(sorted({s.algorithm for s in specs}))
        raise IlargiError(f"{names} trains in this process: leave out cluster (trees do not run on Dask yet).")
    graph, flags = plan_graph(con, query, target, options.group_by)
    check_text_target(graph, specs, estimators)
    if check_graph is not None:
        check_graph(graph)
    check_validation_query(con, graph, options.validation)  # before anything is read, not after the fits
    # A grouped job's rows carry their groups, which no artifact holds yet: it reads cold and keeps nothing.
    off = "a model per group keeps no artifacts (no artifact holds the rows' groups yet)" if graph.group else ""
    artifacts = JobReuse.open(con, graph, flags, enabled=options.reuse, persist=True, off_because=off)
    stats = job_statistics(con, graph, artifacts)
    key = artifacts.matrix_key(graph, flags, options.impute, backend.name)
    held = artifacts.holdings(graph, key)
    chosen, why, explanations = choose_batch_strategy(
        con,
        graph,
        options.strategy,  # a validation share is held out by the rows' values: any read order will do
        [(spec.algorithm, spec.params) for spec in specs],
        options.backend,
        stats=stats,
        reuse=held,
        standardize=options.standardize,
    )
    if options.strategy != AUTO:
        chosen_by = "the caller"
    elif graph.cross_source_features:
        chosen_by = "the query (a feature mixes sources)"
    elif explanations[0] is None:
        chosen_by = "Amalur's rule (the cost model failed)"
    else:
        chosen_by = "the batch (no plan of this model alone)"
    models = []
    for spec, estimator, explanation in zip(specs, estimators, explanations):
        plan = plan_for(explanation, chosen)
        facts = algorithm_facts(spec.algorithm)
        parameter = facts.solver_parameter
        chosen_solver = plan is not None and bool(parameter) and spec.params.get(parameter, AUTO) == AUTO
        if chosen_solver:
            estimator.set_params(**{parameter: plan.solver})  # the solver the cost model chose
        models.append(ModelPlan(spec, estimator, plan, explanation, chosen_solver))
    job = JobPlan(
        query, target, options, graph, flags, artifacts, backend, Strategy(chosen), why, chosen_by, tuple(models)
    )
    return place(con, job, stats, cleanup)


def _place_trees(con: duckdb.DuckDBPyConnection, job: JobPlan, stats: JobStats | None) -> JobPlan:
    """Trees train on rows held in memory: a cluster, or a budget the bins do not fit, is refused in words."""
    options = job.options
    if options.memory_budget is not None and stream_plan(con, job.graph, job.strategy, stats, options.memory_budget):
        raise IlargiError(
            f"{job.models[0].spec.algorithm} holds its training rows in memory (bins do not stream yet) and they "
            "exceed memory_budget: raise memory_budget, or leave it out."
        )
    check_job_memory(con, job.graph, job.strategy, job.models[0].explanation, stats)
    return job


_IN_MEMORY = (
    "{asked} trains on rows held in memory ({which}), and this job would run {what}: {fix}, or select the rows "
    "in the query instead (WHERE ...)."
)


def _in_memory(options: TrainOptions, graph: JoinGraph, what: str, fix: str) -> IlargiError | None:
    """The refusal of a job that asks for rows in memory (group_by, a validation share) and would run elsewhere."""
    asked = [("group_by", "each group's")] if graph.group is not None else []
    asked += [("a validation share", "the rows not held out")] if options.validation_share is not None else []
    if not asked:
        return None
    names, which = zip(*asked)
    return IlargiError(_IN_MEMORY.format(asked=" and ".join(names), which=", ".join(which), what=what, fix=fix))


def place(
    con: duckdb.DuckDBPyConnection, job: JobPlan, stats: JobStats | None, cleanup: contextlib.ExitStack
) -> JobPlan:
    """Where the rows will be: on the caller's cluster, streamed when over the memory budget, or in memory.

    Streamed and distributed jobs run factorized; their plans are priced as they run there.
    """
    options, graph = job.options, job.graph
    client = stream = None
    if job.reads_bins:
        return _place_trees(con, job, stats)
    if options.cluster is not None and (refusal := _in_memory(options, graph, "on a cluster", "leave out cluster")):
        raise refusal
    if options.cluster is not None:
        check_streamable(graph, Placement.DISTRIBUTED)  # before connecting: nothing to close on a refusal
        client = connect_cluster(options.cluster)
        if client is not options.cluster:  # connected here, not the caller's: closed when the job ends
            cleanup.callback(client.close)
        placement = Placement.DISTRIBUTED
    else:
        try:
            stream = stream_plan(con, graph, job.strategy, stats, options.memory_budget)
        except IlargiError:
            if options.memory_budget is not None:
                raise  # the caller's budget: say why it cannot be kept
            stream = None  # the default budget only: train in memory, as DuckDB's memory_limit allows
        if stream is not None and (
            refusal := _in_memory(options, graph, f"streamed ({stream.why})", "raise memory_budget")
        ):
            raise refusal
        if stream is not None:
            check_streamable(graph, Placement.STREAMED)
            cleanup.enter_context(duckdb_memory_held(con, stream.duckdb_memory))
        placement = Placement.MEMORY if stream is None else Placement.STREAMED
    if placement == Placement.MEMORY:
        check_job_memory(con, graph, job.strategy, job.models[0].explanation, stats)  # before any column is read
        return job
    workers = len(client.scheduler_info().get("workers", {})) if client is not None else 1
    models, chose = [], ""
    for m in job.models:
        plan, why = placed_choice(m.explanation, m.plan, stream, workers, m.solver_chosen)
        if why and plan.solver != m.plan.solver:  # streamed, another solver reads less: DuHL
            m.estimator.set_params(**{algorithm_facts(m.spec.algorithm).solver_parameter: plan.solver})
        chose = chose or why
        models.append(replace(m, plan=plan))
    first = models[0].plan
    predicted = f", {first.seconds:.3g} s predicted" if first is not None else ""
    predicted += f" ({chose})" if chose else ""
    if placement == Placement.DISTRIBUTED:
        why = f"{job.why} Distributed: the fact's Parquet files over the cluster's {workers} worker(s){predicted}."
    else:
        why = f"{job.why} Streamed: {stream.why}; {stream.spill_why}{predicted}."
    return replace(
        job, strategy=Strategy.FACTORIZED, why=why, models=models, placement=placement, stream=stream, client=client
    )
