"""The training target's labels at planning: a text target's classes found once, and who may train on them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ilargi_db.errors import IlargiError
from ilargi_db.metadata.target_labels import with_target_classes
from ilargi_db.pipeline.options import ModelSpec
from ilargi_db.plan import JoinGraph


def check_text_target(graph: JoinGraph, specs: Sequence[ModelSpec], estimators: Sequence[Any]) -> None:
    """Refuse text class labels for a model that predicts a number, naming the models that take them."""
    if graph.target_classes is None:
        return
    for spec, estimator in zip(specs, estimators):
        if spec.supervised and not (hasattr(estimator, "predict_proba") or hasattr(estimator, "decision_function")):
            shown = ", ".join(map(repr, graph.target_classes[:5])) + (", ..." if len(graph.target_classes) > 5 else "")
            raise IlargiError(
                f"target {graph.target.name!r} holds text (classes {shown}), but {spec.algorithm} predicts a number: "
                "train a classifier (logistic_regression, linear_svc, or gradient_boosting or random_forest with a "
                "classifying objective), or select a numeric target."
            )


__all__ = ["check_text_target", "with_target_classes"]
