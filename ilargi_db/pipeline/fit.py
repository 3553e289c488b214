"""The fit phase: each planned model fitted on the data read once, warm-started where that cannot change
the result, and returned as a :class:`~ilargi_db.trained_model.TrainedModel` with its job's record."""

from __future__ import annotations

import inspect
import time
from dataclasses import replace
from typing import Any

import numpy as np

from ilargi_db.backend import to_host
from ilargi_db.cost_model.iterations import record as record_iterations
from ilargi_db.linalg import PartitionSource, ScaledMatrix
from ilargi_db.metadata.target_labels import target_labels
from ilargi_db.models.catalog import AUTO, Placement, algorithm_facts
from ilargi_db.models.convergence import advice_after_standardizing
from ilargi_db.pipeline.column_scales import numeric_columns, scale_warning
from ilargi_db.pipeline.metrics import training_metrics
from ilargi_db.pipeline.planning import JobPlan, ModelPlan
from ilargi_db.pipeline.readers import TrainingData
from ilargi_db.reuse.job import JobReuse
from ilargi_db.trained_model import TrainedModel


def fit_model(job: JobPlan, model: ModelPlan, data: TrainingData, shared: dict[str, float]) -> TrainedModel:
    """Fit ``model`` on ``data`` and describe it; ``shared`` holds the seconds of planning and reading."""
    began = time.perf_counter()
    spec, estimator = model.spec, model.estimator
    facts = algorithm_facts(spec.algorithm)
    scaled = job.options.standardize and facts.standardizes  # trees need no scaling, NMF no negative values
    X, y = data.X, data.y
    # k-means' distances hang on the columns' scales (a linear model's predictions do not, only its convergence)
    unscaled = None
    if facts.standardizes and not spec.supervised and not scaled:
        unscaled = scale_warning(X, numeric_columns(data.encoder, X.shape[1]), spec.algorithm)
    M = ScaledMatrix.standardize(X, center=getattr(estimator, "fit_intercept", True)) if scaled else X
    labels = target_labels(y, job.graph.target.duckdb_type, job.graph.target_classes) if spec.supervised else None
    warm = fit_estimator(job.artifacts, spec.algorithm, estimator, scaled, M, labels)
    unconverged = getattr(estimator, "convergence_warning_", None)
    if unconverged and scaled:  # the estimator saw a matrix, not the option: its advice to standardize is moot
        unconverged = estimator.convergence_warning_ = advice_after_standardizing(unconverged)
    if unscaled:  # kept on the estimator, as convergence_warning_ is: train warns of it, SQL summarizes it
        estimator.scale_warning_ = unscaled
    if scaled:
        in_columns_units(estimator, to_host(M.scale), to_host(M.mean))
    trained = time.perf_counter()
    solver = solver_that_ran(estimator, spec.algorithm)
    if model.solver_chosen:
        give_back_the_solver_choice(model)
    if hasattr(estimator, "n_iter_"):
        placed = job.placement == Placement.STREAMED
        record_iterations(spec.algorithm, solver, spec.params, float(estimator.n_iter_), scaled=scaled, streamed=placed)
    graph = job.graph
    result = TrainedModel(
        estimator,
        data.encoder,
        spec.algorithm,
        job.query,
        job.target if spec.supervised else None,
        target_type_=graph.target.duckdb_type if graph.target is not None and spec.supervised else None,
        target_classes_=list(graph.target_classes) if graph.target_classes is not None and spec.supervised else None,
        feature_types_=[f.duckdb_type for f in graph.features],
        standardize_=scaled,
        strategy_=job.strategy.value,  # a plain string, as a model loaded from the registry has it
        decision_=job.why,
        plan_=(
            model.plan.to_dict()
            if model.plan is not None
            else {
                "strategy": job.strategy.value,
                "solver": solver,
                "backend": job.backend.name,
                "chosen_by": job.chosen_by,
            }
        ),
        explanation_=model.explanation,
        n_rows_=int(X.shape[0]),
        streamed_=streamed(job, data),
        reused_=job.artifacts.describe() + ([warm] if warm else []),
        unlabelled_rows_=data.unlabelled,
        warnings_=[w for w in (unconverged, unscaled) if w] + job.artifacts.warnings,
    )
    result.training_metrics_ = training_metrics(result, X, y)
    done = time.perf_counter()
    result.timings_ = {
        "planning": shared["planning"],
        "data": shared["data"],
        "training": trained - began,
        "metrics": done - trained,
        "total": (done - began) + shared["planning"] + shared["data"],
        **({"shared_by": len(job.models)} if len(job.models) > 1 else {}),  # planning and data served the batch
    }
    return result


def in_columns_units(estimator: Any, scale: Any, mean: Any) -> None:
    """A model fitted on standardized columns, given back in the columns' own units: a linear model's
    coefficients and intercept (the same predictions); k-means' centers, with the scale its distances keep."""
    if hasattr(estimator, "coef_"):  # a row of coefficients per class for a multinomial model
        estimator.coef_ = estimator.coef_ / scale
        intercept = estimator.intercept_ - estimator.coef_ @ mean  # mean 0 without intercept
        estimator.intercept_ = float(intercept) if np.ndim(intercept) == 0 else intercept
    else:
        estimator.cluster_centers_ = estimator.cluster_centers_ * scale + mean
        estimator.feature_scale_ = scale


def streamed(job: JobPlan, data: TrainingData) -> dict | None:
    """How the job streamed (``streamed_``): its plan, with the partitions the open stream counted, and what the
    fit read from it (``partitions_read``, ``bytes_read``: the partitions' bytes as built, every pass)."""
    if job.stream is None:
        return None
    found = replace(job.stream, partitions=data.stream.partitions).to_dict()  # the rows in use, known once open
    source = getattr(data.X, "partitions", None)
    if isinstance(source, PartitionSource):
        found.update(partitions_read=source.reads, bytes_read=source.bytes_read)
    return found


def fit_estimator(job: JobReuse, algorithm: str, estimator: Any, scaled: bool, M: Any, y: Any) -> str:
    """Fit ``estimator`` on ``M`` (and ``y`` when supervised), from an earlier model where :func:`warm_start`
    allows; keep a converged linear model as a later job's start. Returns the start taken, in words."""
    if y is None:
        estimator.fit(M)
    else:
        init, warm = warm_start(job, algorithm, estimator, scaled, M, y)
        # warn=False: the entry point tells of convergence (train warns, SQL summarizes), once the model is whole
        estimator.fit(M, y, warn=False, **init)
        if init and unconverged_after(estimator):  # stopped by max_iter: the result hangs on the start
            estimator.fit(M, y, warn=False)  # so the cold start's, as without reuse
            warm = ""
    # a start only from a converged fit with one coefficient per column (not a multinomial one's k rows)
    if hasattr(estimator, "coef_") and np.ndim(estimator.coef_) == 1 and not unconverged_after(estimator):
        loss = float(estimator.loss_curve_[-1]) if getattr(estimator, "loss_curve_", None) else 0.0
        job.record_fit(algorithm, scaled, M.feature_names, estimator.coef_, estimator.intercept_, loss)
    return warm if y is not None else ""


def solver_that_ran(estimator: Any, algorithm: str) -> str:
    """The solver a fitted estimator ran (its ``solver_``, its ``solver`` setting, or the algorithm's only one)."""
    facts = algorithm_facts(algorithm)
    return getattr(estimator, "solver_", None) or getattr(estimator, "solver", None) or facts.solvers[0].name


def give_back_the_solver_choice(model: ModelPlan) -> None:
    """Undo the plan phase's ``set_params``: the caller's "auto" put back (``solver_`` says what ran), and
    the plan that chose the solver kept as ``solver_reason_``."""
    estimator, plan = model.estimator, model.plan
    estimator.set_params(**{algorithm_facts(model.spec.algorithm).solver_parameter: AUTO})
    estimator.solver_reason_ = f"the cost model's plan: {plan.label}, {plan.seconds:.3g} s predicted"


def stops_early(estimator: Any) -> bool:
    """Whether the caller asked the solver to stop before the estimator's defaults would: ``max_iter`` below
    its default, or a ``tol`` above it.

    The default tolerances (scikit-learn's) stop at what the estimator reports as the optimum: there a
    warm and a cold start agree to within that tolerance. A looser ``tol`` stops wherever the path from
    the start first meets it (a cold and a warm start measured 1.6 apart at logistic ``tol=0.01``), so
    the model would depend on what trained before.
    """
    defaults = inspect.signature(type(estimator)).parameters
    return estimator.max_iter < defaults["max_iter"].default or estimator.tol > defaults["tol"].default


def unconverged_after(estimator: Any) -> bool:
    """Whether the fit stopped at ``max_iter`` before its tolerance."""
    return getattr(estimator, "convergence_warning_", None) is not None


def warm_start(
    job: JobReuse, algorithm: str, estimator: Any, scaled: bool, M: Any, y: Any
) -> tuple[dict[str, Any], str]:
    """The ``fit`` arguments that start an iterative convex solver from an earlier model, and what it is.

    Only where the estimator says a start lands on the cold start's result within its tolerance
    (``takes_start``: L2-regularized logistic regression, ridge by conjugate gradients; k-means and NMF are
    not convex, a start would change their result) and the caller did not stop it early (:func:`stops_early`:
    with a looser ``tol`` or a capped ``max_iter`` the result would depend on the start, so the fit starts
    cold and gives the cold model exactly). A start is taken only from an earlier model that converged, and
    a warm-started fit that does not converge is fitted again cold.
    """
    if not estimator.takes_start(M.shape[1], y) or stops_early(estimator):
        # an early stop lands where the path from the start first meets it
        return {}, ""
    found = job.warm_start(algorithm, scaled, M.feature_names)
    return (estimator.start_arguments(found[0], found[1]), found[2]) if found is not None else ({}, "")
