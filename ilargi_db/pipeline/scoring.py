"""Scoring: the rows of another query encoded as in a model's training, then predicted or evaluated."""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ilargi_db.backend import get_backend
from ilargi_db.errors import IlargiError, PlanError, speaking_of
from ilargi_db.interruption import interruptible_job
from ilargi_db.metadata.target_labels import with_target_classes
from ilargi_db.models.catalog import SUPERVISED, Strategy, algorithm_facts
from ilargi_db.pipeline.binned_readers import ROW_READERS
from ilargi_db.pipeline.metrics import metrics_of
from ilargi_db.pipeline.readers import ReadSettings, TrainingData
from ilargi_db.plan import (
    build_join_graph,
    is_categorical,
    is_numeric,
    is_text,
    mark_categorical_coalesce,
)
from ilargi_db.read_snapshot import ReadSnapshot
from ilargi_db.trained_model import GroupedModel, TrainedModel


def encoded_rows(
    con: duckdb.DuckDBPyConnection,
    model: Any,
    query: str,
    backend: str,
    check: bool = False,
    labelled_only: bool = True,
    role: str = "evaluate on",
    keep: bool = False,
) -> TrainingData:
    """The rows of ``query`` encoded as in ``model``'s training (factorized when the query allows).

    ``role`` says what the query is for, in errors ("the query to evaluate on").
    ``check`` refuses inf and values whose squares overflow, as training does; ``labelled_only``
    leaves out rows whose target (when the query selects it) is NULL. The query may select columns that are
    not the model's (an id): ``keep`` reads them beside the features (``TrainingData.kept``), row for row.
    """
    if not isinstance(model, TrainedModel):
        raise IlargiError(
            "this needs a model returned by ilargi_db.train() or ilargi_db.load_model(); call model.predict(X) "
            "on arrays otherwise."
        )
    encoder = model.encoder_
    with ReadSnapshot(con), speaking_of(f"the query to {role}"):  # one committed state; errors name this query
        group_by = model.group_by_ if isinstance(model, GroupedModel) else None  # its rows' groups pick the model
        scored = model.scoring_query(query)
        # Scoring reads the rows once: a LIMIT over any source previews the rows DuckDB returns first.
        columns = [c.lower() for c in build_join_graph(con, scored.query, read_once=True).feature_names]
        target = model.target_ if model.target_ is not None and model.target_.lower() in columns else None
        graph = build_join_graph(con, scored.query, target, group_by, read_once=True)
        if target is not None:
            if is_text(graph.target.duckdb_type) != is_text(model.target_type_):
                raise PlanError(
                    f"the target {graph.target.name!r} has type {graph.target.duckdb_type} in this query, but the "
                    f"model was trained on {model.target_type_}: cast it in the query (CAST(... AS "
                    f"{model.target_type_})), so that its values are read as the labels the model knows."
                )
            # a text target read as positions among the labels of the model's training query
            graph = with_target_classes(con, graph, read_classes(model) if is_text(model.target_type_) else None)
        encoder.check_features(graph.feature_names)
        if group_by is not None and model.group_type_ and graph.group.duckdb_type != model.group_type_:
            raise PlanError(  # its text would differ (1 is not 1.0): every row would find no group's model
                f"the group column {graph.group.name!r} has type {graph.group.duckdb_type} in this query, but the "
                f"model was trained on {model.group_type_}: cast it in the query (CAST(... AS {model.group_type_}))."
            )
        for feature, categorical in zip(graph.features, encoder.categorical):
            t = feature.duckdb_type
            if not (is_numeric(t) if not categorical else is_numeric(t) or is_categorical(t)):
                learned = "a category (text)" if categorical else "a number"
                raise PlanError(
                    f"feature {feature.name!r} has type {t} in this query, but the model learned it as {learned}: "
                    "cast it in the query."
                )
        graph = mark_categorical_coalesce(graph, encoder.categorical)
        kept = tuple(zip(scored.kept_names, scored.kept_sql)) if keep else ()
        read = ReadSettings(
            encoder, fit=False, backend=get_backend(backend), check=check, labelled_only=labelled_only, kept=kept
        )
        # A prediction is an LMM: factorized where the query allows, but kept columns come with the joined rows.
        strategy = Strategy.FACTORIZED if graph.factorizable and not kept else Strategy.MATERIALIZED
        return ROW_READERS[algorithm_facts(model.algorithm_).reads][strategy](con, graph, read)


def read_classes(model: TrainedModel) -> Any:
    """The labels a text target's rows are read among for ``model``: those of its training query (a record from
    before they were kept: its classes, a model per group's first group's, as every group has them)."""
    if model.target_classes_ is not None:
        return model.target_classes_
    first = next(iter(model.models_.values())) if isinstance(model, GroupedModel) else model
    return first.estimator_.classes_


PREDICTION = "prediction"  # the prediction's column beside the kept ones


@interruptible_job
def predict(
    con: duckdb.DuckDBPyConnection, model: Any, query: str, backend: str = "auto", *, keep: bool = False
) -> np.ndarray | pa.Table:
    """Score the rows of another query that selects ``model``'s feature columns (by name, in any order).

    The features are encoded as in training (training means, training
    categories; unseen categories weigh zero) and the prediction runs
    factorized when the query allows it (a prediction is an LMM). Predictions
    come in the query's row order: add ORDER BY to line them up with rows.
    Every row gets one: the query need not select the target, and a row whose
    target is NULL is scored like any other.

    The query may select other columns too (an id, a date). With ``keep=True`` the result is an Arrow table of
    those columns (not the features, the target or a per-group model's group column), in the query's order, and
    ``prediction``, each row's read in one pass of the joined rows; otherwise they are left out and the
    predictions come as an array.
    """
    if keep and isinstance(model, TrainedModel):
        with speaking_of("the query to predict on"):
            kept = model.scoring_query(query).kept_names
        if PREDICTION in (name.lower() for name in kept):
            raise IlargiError(
                f"the query to predict on selects a column named {PREDICTION!r}, the name of the predictions beside "
                "the kept columns: rename it in the query (... AS another_name)."
            )
    data = encoded_rows(con, model, query, backend, labelled_only=False, role="predict on", keep=keep)
    found = np.asarray(model.predict(data.X, data.groups) if data.groups is not None else model.predict(data.X))
    if not keep:
        return found
    if data.kept is None:
        return pa.table({PREDICTION: found})
    return data.kept.append_column(PREDICTION, pa.array(found))


@interruptible_job
def predict_proba(con: duckdb.DuckDBPyConnection, model: Any, query: str, backend: str = "auto") -> np.ndarray:
    """The class probabilities of a classifier for the rows of another query, as scikit-learn's ``predict_proba``.

    One row per row of ``query`` (in its order, as :func:`predict`), one column per class in ``model.classes_``
    order: column 1 is what a binary model's SQL macro ``N_predict`` returns (a multi-class one's returns them all).
    Logistic regression and the tree classifiers give probabilities; other models are refused (``predict`` gives
    their predictions).
    """
    if isinstance(model, TrainedModel) and not hasattr(model.estimator_, "predict_proba"):
        raise IlargiError(
            f"a {model.algorithm_} model gives no class probabilities: use ilargi_db.predict(con, model, query) for "
            "its predictions, or train a classifier (logistic_regression, or gradient_boosting or random_forest "
            "on a class target)."
        )
    data = encoded_rows(con, model, query, backend, labelled_only=False, role="predict on")
    return np.asarray(
        model.predict_proba(data.X, data.groups) if data.groups is not None else model.predict_proba(data.X)
    )


@interruptible_job
def evaluate(con: duckdb.DuckDBPyConnection, model: Any, query: str, backend: str = "auto") -> dict[str, Any]:
    """Metrics of ``model`` on the rows of ``query`` (which selects the features, and the target if supervised).

    Regression (gradient boosting with squared error too): r2, rmse, mae. Logistic (and boosting with log
    loss): accuracy, precision, recall, f1, log_loss,
    roc_auc (on more than two classes: precision, recall, f1 and roc_auc averaged over the classes, one
    against the rest). The linear SVM: accuracy, precision, recall, f1, hinge_loss, roc_auc (of its decision
    function). k-means: inertia. Gaussian NMF: reconstruction_error. Supervised models
    also report ``rows`` (the rows scored) and ``unlabelled_rows_left_out`` (rows
    whose target is NULL: they cannot be scored against a label).
    """
    data = encoded_rows(con, model, query, backend, check=True)
    if data.X.shape[0] == 0:
        raise IlargiError("the query to evaluate on returned no rows (with a non-NULL target): check its WHERE clause.")
    if model.algorithm_ in SUPERVISED and data.y is None:
        raise IlargiError(f"evaluating needs the target: select {model.target_!r} in the query.")
    if data.groups is not None:
        return grouped_metrics(model, data)
    metrics = metrics_of(model, data.X, data.y)
    if model.algorithm_ in SUPERVISED:
        metrics.update(rows=int(data.X.shape[0]), unlabelled_rows_left_out=int(data.unlabelled))
    return metrics


def grouped_metrics(model: GroupedModel, data: TrainingData) -> dict[str, Any]:
    """Each group's metrics on its rows of ``data`` by its own model; rows of other groups counted, not scored."""
    codes = model.group_codes(data.groups)
    labels = {id(one): label for label, one in model.models_.items()}
    found = {}
    for one, rows in model.rows_of_each(codes):
        y = None if data.y is None else data.y[rows]
        found[labels[id(one)]] = {**metrics_of(one, data.X[rows], y), "rows": len(rows)}
    scored = int(np.count_nonzero(codes >= 0))
    if not scored:
        raise IlargiError(
            f"no row of the query has a group the model was trained for (groups of {model.group_by_}: "
            f"{', '.join(map(repr, model.groups_[:5]))}{' ...' if len(model.models_) > 5 else ''})."
        )
    return {
        "groups": found,
        "rows": scored,
        "rows_without_model": int(len(codes) - scored),
        **({"unlabelled_rows_left_out": int(data.unlabelled)} if model.algorithm_ in SUPERVISED else {}),
    }
