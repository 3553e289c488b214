"""The SQL functions' implementations: ``ilargi_train``, ``ilargi_explain``, ``ilargi_evaluate``, ...

Each is a scalar Python UDF (registered by :mod:`.udfs`, which imports this module on a function's first
call) with ``side_effects=True`` (DuckDB would otherwise fold a call with constant arguments at plan time,
so EXPLAIN would train) and ``null_handling="special"`` (a NULL target means "unsupervised",
not "return NULL"). A UDF may not query the connection running it, so the work
runs on ``con.cursor()``, a second connection to the same database: it sees
committed tables and views, not TEMP tables or registered DataFrames. Its
session is made the caller's first (``session.py``: the database in use, the
search path, the time zone, ...), passed by the TEMP macro as a last argument. The
optional ``options`` argument comes from a TEMP macro with a default, since
Python UDFs cannot be overloaded. Every function returns JSON; those of
``udfs.TABLE_RESULTS`` (``ilargi_cross_validate``) a JSON array that their TEMP
table macro unnests into rows (Python cannot register a table function).
"""

from __future__ import annotations

import json
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import duckdb

from ilargi_db.cluster import registered_cluster
from ilargi_db.database_identity import name_database
from ilargi_db.errors import IlargiError, PlanError
from ilargi_db.interruption import check_interrupted, interruptible
from ilargi_db.models.catalog import SETTINGS, make_estimator
from ilargi_db.pipeline import ModelSpec, TrainOptions, evaluate, explain, run_training
from ilargi_db.pipeline.options import check_model_size, check_target
from ilargi_db.plan import JoinGraph
from ilargi_db.reuse import artifacts, clear_artifacts, set_artifact_budget
from ilargi_db.sql_functions.cross_validation import cross_validate_rows
from ilargi_db.sql_functions.options import load_json, parse_options, required
from ilargi_db.sql_functions.registry import (
    check_macro_parameters,
    check_model_name,
    check_store,
    drop_model,
    load_model,
    save_models,
)
from ilargi_db.sql_functions.session import apply_session

# A UDF that queried DuckDB could call these functions again, on a DuckDB thread this one waits for:
# one call at a time per process, refused (not queued) so that such a call errors instead of hanging.
_RUNNING = threading.Lock()


def explain_options(algorithm: str, options: str | None) -> dict:
    """The options of ``ilargi_explain``: those of ``ilargi_train`` less the ones that do not change the choice."""
    kwargs = parse_options(algorithm, options)
    for key in ("strategy", "impute"):
        kwargs.pop(key, None)
    return kwargs


def _finite(value: Any) -> Any:
    """JSON has no NaN: metrics that are undefined (e.g. ROC AUC with one class) become null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _on_cursor(con: weakref.ref, session: str, work: Callable[[duckdb.DuckDBPyConnection], Any]) -> Any:
    """Run ``work`` on a second connection to ``con()`` in the caller's ``session`` (:func:`capture_sql`);
    explain a table only the outer connection can see."""
    outer = con()
    if outer is None:
        raise IlargiError("the connection these functions were installed on is closed: install them on a new one.")
    if not _RUNNING.acquire(blocking=False):
        raise IlargiError(
            "another ilargi_db SQL function is running in this process: they run one at a time, and cannot be "
            "called from inside a training or evaluation query. Call it on its own, after the other finishes."
        )
    try:
        cursor = outer.cursor()
        name_database(cursor, like=outer)
        try:
            apply_session(cursor, session)
            with interruptible(cursor):  # Ctrl-C and interrupt_training() reach it on DuckDB's thread too
                return work(cursor)
        finally:
            cursor.close()
    except (duckdb.CatalogException, PlanError) as err:
        if isinstance(err, PlanError) and "unknown table" not in str(err):
            raise
        raise type(err)(
            f"{err} Note: ilargi_db's SQL functions read the database through a second connection, which does "
            "not see TEMP tables or registered DataFrames: store them with CREATE TABLE, or use the Python API."
        ) from None
    finally:
        _RUNNING.release()


def train_and_store(
    con: duckdb.DuckDBPyConnection, name: str, algorithm: str, query: str, target: str | None, options: str | None
) -> dict:
    """Train, store as the next version of ``name``, create the macros; the short summary ``ilargi_train`` prints.

    ``ilargi_train`` runs it on its own cursor; ``ilargi train`` on the command line calls it directly.
    """
    start = time.perf_counter()
    name = check_model_name(name)
    kwargs = parse_options(required(algorithm, "the algorithm"), options)
    query = required(query, "the training query")
    store = check_store(con)  # read-only, or someone else's ilargi.models: refused before, not after, training
    _resolve_cluster(con, kwargs)
    options = TrainOptions(**{key: kwargs.pop(key) for key in SETTINGS if key in kwargs})
    check_target(algorithm, target)
    specs = [ModelSpec(algorithm, kwargs, as_macro=True)]
    (model,) = run_training(con, query, target, specs, options, check_graph=_macro_parameters)  # warnings summarized
    check_interrupted()  # the last point where stopping leaves nothing stored
    save_models(con, [(name, model)], checked=store)
    return _summary(model, time.perf_counter() - start)


def _macro_parameters(graph: JoinGraph) -> None:
    """Refuse, before any data is read, features whose names cannot be the macros' parameters."""
    check_macro_parameters(graph.feature_names + ([graph.group.name] if graph.group is not None else []))


def _resolve_cluster(con: duckdb.DuckDBPyConnection, options: dict) -> None:
    """The option ``"cluster"``, a name the Python host registered, replaced by what it registered under it."""
    if "cluster" in options:
        options["cluster"] = registered_cluster(con, options["cluster"])


def _summary(model: Any, seconds: float) -> dict:
    """What ``ilargi_train`` returns for one stored model: short; the full detail is in the registry."""
    algorithm = model.algorithm_
    summary = {
        "name": model.name_,
        "version": model.version_,
        "algorithm": algorithm,
        "strategy": model.strategy_,
        "why": model.decision_,
        **({"solver": model.solver_, "solver_why": model.solver_reason_} if hasattr(model, "solver_") else {}),
        **({"objective": model.objective_} if hasattr(model, "objective_") else {}),  # what "auto" ran (trees)
        "rows": model.n_rows_,
        **({"group_by": model.group_by_, "groups": len(model.models_)} if hasattr(model, "models_") else {}),
        # Counts, not names: a model with a 20,000-category key has 20,000 columns (their names and
        # weights are in ilargi.models and ilargi.category_weights).
        "features": len(model.encoder_.specs_),
        "columns": len(model.encoder_.feature_names_out_),
        "metrics": model.training_metrics_,
        **({"validation_metrics": model.validation_metrics_} if model.validation_metrics_ else {}),
        "seconds": {**model.timings_, "total": seconds},
        "macros": model.macros_,
        "unlabelled_rows_left_out": model.unlabelled_rows_,
        "warnings": model.warnings_,
        "artifacts_stored": model.stored_,  # what the store wrote beside the database file, and where
    }
    return _finite(summary)


def train_batch_and_store(
    con: duckdb.DuckDBPyConnection, query: str, target: str | None, models: str | None, options: str | None
) -> list[dict]:
    """Train the models of the JSON array ``models`` on one read of ``query``, store each; their summaries.

    Each element is ``{"name": ..., "algorithm": ..., <parameters>}``; ``options`` holds what the batch
    shares (``strategy``, ``backend``, ``standardize``, ``impute``).
    """
    start = time.perf_counter()
    query = required(query, "the training query")
    specs = parse_batch(required(models, "the models"))
    given = (
        load_json(options, "options", """an object such as '{"strategy": "auto"}'""")
        if options and options.strip()
        else {}
    )
    unknown = sorted(set(given) - set(SETTINGS)) if isinstance(given, dict) else []
    if unknown:
        raise IlargiError(
            f"option(s) {', '.join(map(repr, unknown))} belong to a model, not to the batch: put them in its "
            f"element of the models array; the batch's options are {', '.join(SETTINGS)}."
        )
    shared = parse_options(specs[0][1], options)  # types checked as ilargi_train checks them
    store = check_store(con)  # read-only, or someone else's ilargi.models: refused before, not after, training
    _resolve_cluster(con, shared)
    models = [ModelSpec(a, p, as_macro=True) for _, a, p in specs]
    trained = run_training(con, query, target, models, TrainOptions(**shared), check_graph=_macro_parameters)
    check_interrupted()  # the last point where stopping leaves nothing stored
    save_models(con, [(name, model) for (name, _, _), model in zip(specs, trained)], checked=store)  # all or none
    seconds = time.perf_counter() - start
    return [_finite(_summary(model, seconds)) for model in trained]


def parse_batch(models: str) -> list[tuple[str, str, dict]]:
    """``[(name, algorithm, parameters)]`` from the models JSON array, each checked as ``ilargi_train`` checks it."""
    parsed = load_json(
        models, "models", """an array such as '[{"name": "m1", "algorithm": "linear_regression", "alpha": 1.0}]'"""
    )
    if not isinstance(parsed, list) or not parsed or not all(isinstance(m, dict) for m in parsed):
        raise IlargiError(
            """models must be a non-empty JSON array of objects such as '[{"name": "m1", "algorithm": "kmeans", """
            f""""n_clusters": 5}}]', got {models!r}."""
        )
    specs, names = [], set()
    for i, m in enumerate(parsed, start=1):
        if "name" not in m or "algorithm" not in m:
            raise IlargiError(f'model {i} of the batch needs a "name" and an "algorithm", got {json.dumps(m)}.')
        name = check_model_name(m["name"])
        if name in names:
            raise IlargiError(f"model name {name!r} appears twice in the batch: give each model its own name.")
        names.add(name)
        params = {k: v for k, v in m.items() if k not in ("name", "algorithm")}
        try:
            kwargs = parse_options(m["algorithm"], json.dumps(params), allowed_extra={})
        except IlargiError as err:
            raise IlargiError(f"model {i} of the batch ({name}): {err}") from None
        specs.append((name, m["algorithm"], kwargs))
    return specs


def sql_train_batch(
    con: weakref.ref, query: str, target: str | None, models: str | None, options: str | None, session: str
) -> str:
    """``ilargi_train_batch``: several models on one read of the training query; a JSON array of summaries."""
    return json.dumps(
        _on_cursor(con, session, lambda cursor: train_batch_and_store(cursor, query, target, models, options))
    )


def sql_train(
    con: weakref.ref, name: str, algorithm: str, query: str, target: str | None, options: str | None, session: str
) -> str:
    """``ilargi_train``: train, store as the next version of ``name``, create the macros; a JSON summary."""
    return json.dumps(
        _on_cursor(con, session, lambda cursor: train_and_store(cursor, name, algorithm, query, target, options))
    )


def sql_explain(
    con: weakref.ref, algorithm: str, query: str, target: str | None, options: str | None, session: str
) -> str:
    """``ilargi_explain``: the strategy ``ilargi_train`` would choose, both predicted times, and why."""
    kwargs = explain_options(required(algorithm, "the algorithm"), options)
    query = required(query, "the training query")
    params = {k: v for k, v in kwargs.items() if k not in SETTINGS}
    check_model_size(algorithm, make_estimator(algorithm, params))  # what ilargi_train would refuse, refused here
    explanation = _on_cursor(
        con, session, lambda cursor: explain(cursor, query, target=target, algorithm=algorithm, **kwargs)
    )
    return json.dumps(_finite(explanation.to_dict()))


def sql_evaluate(con: weakref.ref, name: str, query: str, session: str) -> str:
    """``ilargi_evaluate``: the current version of ``name`` scored on the rows of ``query``."""

    query = required(query, "the query to evaluate on")

    def work(cursor):
        model = load_model(cursor, name)
        return model, evaluate(cursor, model, query)

    model, metrics = _on_cursor(con, session, work)
    return json.dumps(_finite({"name": model.name_, "version": model.version_, "metrics": metrics}))


def sql_cross_validate(
    con: weakref.ref, algorithm: str, query: str, target: str | None, options: str | None, session: str
) -> str:
    """``ilargi_cross_validate``: the scores of every parameter set on every fold; stores nothing."""
    rows = _on_cursor(con, session, lambda cursor: cross_validate_rows(cursor, algorithm, query, target, options))
    return json.dumps([_finite(row) for row in rows])


def sql_drop_model(con: weakref.ref, name: str, session: str) -> str:
    """``ilargi_drop_model``: every version of ``name`` and its macros, gone."""
    versions = _on_cursor(con, session, lambda cursor: drop_model(cursor, name))  # drop_model checks writability
    return json.dumps({"dropped": check_model_name(name), "versions": versions})


def sql_artifacts(con: weakref.ref, session: str) -> str:
    """``ilargi_artifacts()``: the artifacts of this process and of the database (``ilargi.artifacts`` lists
    the database's alone, for any client)."""
    found = _on_cursor(con, session, lambda cursor: artifacts(cursor))
    return json.dumps(_finite(found), default=str)


def sql_clear_artifacts(con: weakref.ref, session: str) -> str:
    """``ilargi_clear_artifacts()``: forget every stored artifact; how many went from each tier."""
    return json.dumps(_on_cursor(con, session, lambda cursor: clear_artifacts(cursor)))


def sql_artifact_budget(con: weakref.ref, memory: str | None, storage: str | None, session: str) -> str:
    """``ilargi_artifact_budget(memory, storage)``: set the byte budgets (NULL keeps one as it is)."""
    return json.dumps(_on_cursor(con, session, lambda cursor: set_artifact_budget(cursor, memory, storage)))
