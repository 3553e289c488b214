"""The driver: ``train`` and ``train_batch`` run the phases in order (``run_training``).

    options (:mod:`.options`) -> plan (:mod:`.planning`, :mod:`.placement`) -> read (:mod:`.reading`:
    :mod:`.readers`, :mod:`.streaming` or the cluster's partitions) -> fit (:mod:`.fit`) -> record

One read-only snapshot covers the plan and the read (and every pass of a stream); the record phase
stores new artifacts in its own transaction after it. ``explain`` runs the plan phase alone
(:mod:`.explaining`); ``predict`` and ``evaluate`` read another query through the same readers
(:mod:`.scoring`).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import duckdb

from ilargi_db._terminal import progress
from ilargi_db.backend import get_backend
from ilargi_db.backend.host_memory import give_back_freed_memory
from ilargi_db.errors import ConvergenceWarning, IlargiError
from ilargi_db.interruption import interruptible_job
from ilargi_db.models.catalog import Placement
from ilargi_db.models.estimator import scikit_learns_too
from ilargi_db.pipeline.fit import fit_model
from ilargi_db.pipeline.groups import fit_groups
from ilargi_db.pipeline.options import ModelSpec, TrainOptions, check_target, make_estimators, model_specs
from ilargi_db.pipeline.planning import JobPlan, plan_job
from ilargi_db.pipeline.readers import TrainingData
from ilargi_db.pipeline.reading import read_job
from ilargi_db.pipeline.repeat import keep_models, stored_models
from ilargi_db.pipeline.validation import held_out_metrics, split, validated_on_query
from ilargi_db.plan import JoinGraph
from ilargi_db.read_snapshot import ReadSnapshot
from ilargi_db.trained_model import TrainedModel


@interruptible_job
def train(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None = None,
    algorithm: str = "linear_regression",
    strategy: str = "auto",
    backend: str = "auto",
    *,
    standardize: bool = False,
    impute: bool = True,
    reuse: bool | str = True,
    memory_budget: int | str | None = None,
    cluster: Any = None,
    group_by: str | None = None,
    validation: float | str | None = None,
    **params: Any,
) -> Any:
    """Train a model on the rows of a SELECT over joined tables.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
    query : str
        A single SELECT (DuckDB SQL) whose columns are the features (and the target).
    target : str or None
        The label column for ``linear_regression`` / ``logistic_regression``.
    algorithm : {"linear_regression", "logistic_regression", "linear_svc", "kmeans", "gnmf", "gradient_boosting"}
        ``gradient_boosting``: histogram-boosted trees (regression or binary classification, ``objective``)
        on each feature's bins, categories split natively and NULL sent where each split learned.
        ``linear_svc``: a linear SVM (hinge loss) fitted in the dual by DuHL.
    strategy : {"auto", "factorized", "materialized"}
        Train on the normalized matrix, on the DuckDB join, or let ilargi_db choose.
    backend : {"auto", "numpy", "cupy"}
    standardize : bool
        Train linear models and k-means on standardized columns (computed factorized; k-means keeps its
        centers in the columns' units and measures distances on the scaled columns); the
        coefficients are returned in the original units.
    impute : bool
        Replace numeric NULLs by the training mean (VARCHAR/ENUM/BOOLEAN columns
        are one-hot encoded, NULL as its own category).
    reuse : bool or "memory"
        Use and keep artifacts of earlier jobs (statistics, the key-only join, each feature's values,
        the encoded matrix, X^T X) while the tables they came from are unchanged: in this process and, for
        a database file opened for writing, in files beside it (``<file>.ilargi/``) for later processes;
        ``"memory"`` keeps them in this process only; ``False`` runs cold and keeps nothing (see
        :mod:`ilargi_db.reuse`).
    memory_budget : int, str or None
        Bytes (or a size such as ``"2GB"``) the training data may take in memory; above it the fact is
        streamed from DuckDB in row partitions, the next read while the current one computes (see
        docs/architecture.md, "Row partitions and streaming"). None: half the memory free when the job
        starts (and a job that cannot stream then trains in memory, as DuckDB's memory_limit allows).
    cluster : dask.distributed.Client, str or None
        Train on a Dask cluster (a client, or a scheduler address such as ``"tcp://host:8786"``, reached
        within :data:`~ilargi_db.cluster.CONNECT_SECONDS`; its workers must run this build): the fact
        must be ``read_parquet(...)`` files every worker can read; each worker reads its files with DuckDB
        and keeps its partitions; the driver adds the partials (see :mod:`ilargi_db.cluster`).
    group_by : str or None
        A SELECT column (not a feature): one model per value, each fitted on its rows of one read; returns a
        :class:`~ilargi_db.trained_model.GroupedModel` (see :mod:`ilargi_db.pipeline.groups`).
    validation : float, str or None
        A share of the rows (e.g. ``0.2``) held out of the fit, or a SELECT of rows to score: the model's
        ``validation_metrics_`` (see :mod:`ilargi_db.pipeline.validation`).
    **params
        The estimator's parameters (e.g. ``alpha=1.0``, ``n_clusters=5``).

    Returns
    -------
    TrainedModel
        The fitted estimator (``model.estimator_``; its ``coef_``, ``predict``... are the model's too),
        its encoder, and the job: ``strategy_``, ``decision_`` (why), ``plan_``, ``timings_`` (seconds
        of planning, data, training, training metrics and in total), ``training_metrics_`` (cheap
        ones: see :func:`training_metrics`), ``unlabelled_rows_``.

    Examples
    --------
    >>> import ilargi_db
    >>> con = ilargi_db.connect()
    >>> _ = con.sql("CREATE TABLE f AS SELECT range % 3 AS k, range * 1.0 AS x, 2.0 * range + 1 AS y FROM range(30)")
    >>> _ = con.sql("CREATE TABLE d AS SELECT range AS k, ['a', 'b', 'c'][range + 1] AS kind FROM range(3)")
    >>> model = ilargi_db.train(con, "SELECT x, kind, y FROM f JOIN d USING (k)", target="y", backend="numpy")
    >>> model.strategy_ in ("factorized", "materialized"), round(float(model.coef_[0]), 6)
    (True, 2.0)
    """
    check_target(algorithm, target)
    options = TrainOptions.of(locals())
    (model,) = run_training(con, query, target, [ModelSpec(algorithm, params)], options)
    _warn_of_convergence([model])
    return model


@interruptible_job
def train_batch(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None = None,
    models: Sequence[Any] = (),
    strategy: str = "auto",
    backend: str = "auto",
    *,
    standardize: bool = False,
    impute: bool = True,
    reuse: bool | str = True,
    memory_budget: int | str | None = None,
    cluster: Any = None,
    group_by: str | None = None,
    validation: float | str | None = None,
) -> list[TrainedModel]:
    """Train several models on one training query in one call, reading the data once.

    One read-only snapshot, one plan of the query, one set of statistics and one read of the data
    (the key-only join and scans, or the materialized join) serve every model; each then fits on
    the same matrix. With ``strategy="auto"`` the cost model prices each model's plans and takes the
    strategy whose plans cost least in sum.

    Parameters
    ----------
    models : sequence
        Each model as an algorithm name, an ``(algorithm, {parameters})`` pair, or a dict
        ``{"algorithm": ..., **parameters}``.
    target : str or None
        The label column of the supervised models; unsupervised ones learn from the other columns. All
        models learn from the same rows: those whose target is not NULL (``unlabelled_rows_`` counts
        the others), so an unsupervised model may see fewer rows than it would alone.
    standardize : bool
        Standardize the columns of the linear models and k-means (as for :func:`train`).
    query, strategy, backend, impute, reuse, memory_budget, cluster, group_by, validation
        As for :func:`train` (with ``group_by``, each model of the batch is one model per group).

    Returns
    -------
    list of TrainedModel, in the order of ``models``.

    Examples
    --------
    >>> import ilargi_db
    >>> con = ilargi_db.connect()
    >>> _ = con.sql("CREATE TABLE t AS SELECT range * 1.0 AS x, range % 7 * 1.0 AS z, 2.0 * range AS y FROM range(60)")
    >>> lin, km = ilargi_db.train_batch(con, "SELECT x, z, y FROM t", "y", ["linear_regression", ("kmeans",
    ...                                 {"n_clusters": 2, "random_state": 0})], backend="numpy")
    >>> round(float(lin.coef_[0]), 6), km.cluster_centers_.shape
    (2.0, (2, 2))
    """
    options = TrainOptions.of(locals())
    trained = run_training(con, query, target, model_specs(models), options)
    _warn_of_convergence(trained)
    return trained


def _warn_of_convergence(models: list[TrainedModel]) -> None:
    """The Python API tells of a fit stopped at max_iter as scikit-learn does: a ConvergenceWarning, at the
    caller's line (the SQL functions return it in their summary; every model keeps it in ``warnings_``)."""
    for model in models:
        for label, one in getattr(model, "models_", {"": model}).items():  # a grouped model: each group's
            said = f"group {label!r}: " if label else ""
            if getattr(one.estimator_, "convergence_warning_", None):
                warnings.warn(
                    said + one.estimator_.convergence_warning_, scikit_learns_too(ConvergenceWarning), stacklevel=4
                )
            if getattr(one.estimator_, "scale_warning_", None):  # k-means on columns of scales far apart
                warnings.warn(said + one.estimator_.scale_warning_, UserWarning, stacklevel=4)


@interruptible_job
def run_training(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None,
    specs: Sequence[ModelSpec],
    options: TrainOptions,
    *,
    check_graph: Callable[[JoinGraph], None] | None = None,
) -> list[TrainedModel]:
    """Train each model of ``specs`` on one read of ``query``'s rows: the phases, in order.

    Each model records its warnings (``warnings_``) and nothing is shown: :func:`train` warns, the SQL
    functions summarize. ``check_graph`` sees the planned join graph first, before statistics or data are read
    (the SQL functions check there that the features can be a macro's parameters: the query planned once).
    """
    start = time.perf_counter()
    stages = progress(2 + len(specs), "planning")  # a bar over the stages, in a terminal or a notebook only
    snapshot = ReadSnapshot(con)  # every read sees one committed state of the database
    with contextlib.ExitStack() as cleanup:  # on any error too: the stream, the client, the snapshot, the bar
        cleanup.callback(stages.close)
        cleanup.callback(snapshot.close)
        estimators = make_estimators(specs, target)
        options.check(specs)
        backend = get_backend(options.backend)
        snapshot.open()
        job = plan_job(con, query, target, specs, estimators, options, backend, cleanup, check_graph)
        planned = time.perf_counter()
        again = stored_models(job, query, planned - start)  # an earlier process ran this very job
        if again is not None:
            snapshot.close()
            job.artifacts.finish()  # the hits counted
            return validated_on_query(con, again, options.validation)
        stages.update()
        stages.set_description(f"reading data ({Placement.STREAMED if job.stream else job.strategy})")
        data = read_job(con, job)
        give_back_freed_memory()  # the read's Arrow and scratch buffers, before the fits allocate
        cleanup.callback(data.close)
        if job.placement == Placement.MEMORY:
            job.artifacts.confirm_read()  # a file read outside the snapshot did not change under the read
        if job.placement != Placement.STREAMED:
            snapshot.close()  # all read: the fits need no transaction (a stream reads on every pass)
        if data.X.shape[0] == 0:
            what = "rows with a non-NULL target" if target is not None else "rows"
            raise IlargiError(f"the training query returned no {what}: check its joins and WHERE clause.")
        held = None
        if options.validation_share is not None:  # a share of the rows read, held out of every fit
            data, held = split(data, options.validation_share)
        shared = {"planning": planned - start, "data": time.perf_counter() - planned}
        stages.update()
        models = []
        for model in job.models:
            stages.set_description(f"training {model.spec.algorithm}")
            fit = fit_model if data.groups is None else fit_groups  # one model, or one per group_by value
            models.append(fit(job, model, data, shared))
            if held is not None:
                models[-1].validation_metrics_ = held_out_metrics(models[-1], held)
            stages.update()
        give_back_freed_memory()  # the fits' temporaries, before DuckDB stores artifacts and models
        keep_models(job, models, time.perf_counter() - planned)
        stored = record_job(job, data, snapshot)
        for model in models:
            model.stored_ = [stored] if stored else []
    return validated_on_query(con, models, options.validation)


def record_job(job: JobPlan, data: TrainingData, snapshot: ReadSnapshot) -> str | None:
    """The record phase: the sums the fits memoized kept, then new artifacts stored in their own transaction;
    what was stored beside the database, in words (None when nothing was)."""
    if job.placement == Placement.MEMORY and not job.reads_bins:  # a resident normalized matrix: its sums memoized
        job.artifacts.keep_sums(data.X)
    data.close()
    snapshot.close()  # the store writes after the read, never inside its snapshot
    return job.artifacts.finish()
