"""A trained model as SQL: the ``N_predict`` macros and the category weights they look up.

A macro holds the whole model (coefficients or centroids, training means for
imputation) as DOUBLE literals in native SQL, so DuckDB scores rows in parallel
and any client can call it after a reconnect, without ilargi_db. A one-hot
feature with up to ``INLINE_CATEGORIES`` categories is a CASE inside the macro;
a wider one is looked up in ``ilargi.category_weights`` with a scalar subquery,
which DuckDB decorrelates into a hash join (no giant CASE). Unseen categories
(and NULL, unless training saw it) weigh zero, as in the encoder.
"""

from __future__ import annotations

import math
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from sqlglot import exp

from ilargi_db.errors import IlargiError
from ilargi_db.metadata.scans import quote
from ilargi_db.plan import build_join_graph
from ilargi_db.preprocess import ColumnSpec

WEIGHTS_SCHEMA = pa.schema(
    [
        ("model", pa.string()),
        ("version", pa.int32()),
        ("feature", pa.string()),
        ("category", pa.string()),
        ("weights", pa.list_(pa.float64())),
    ]
)


def quote_identifier(name: str) -> str:
    r"""``name`` as a DuckDB identifier (always quoted).

    >>> quote_identifier('a"b')
    '"a""b"'
    """
    return quote(name)


def quote_string(text: str) -> str:
    r"""``text`` as a SQL string literal.

    >>> quote_string("it's")
    "'it''s'"
    """
    return "'" + text.replace("'", "''") + "'"


def double(value: float) -> str:
    """A DOUBLE literal that reads back as exactly ``value`` (exponent form is DOUBLE, not DECIMAL, in DuckDB).

    >>> double(0.1)
    '1.0000000000000001e-01'
    """
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"a model constant is not finite ({value}); the model cannot be written as SQL.")
    return f"{value:.16e}"


INLINE_CATEGORIES = 64  # up to this many categories a CASE beats the lookup join (docs/benchmarks.md)


class MacroWriter:
    """Writes the SQL of one model version: macro bodies and the category-weight rows they read.

    A feature with at most ``inline_categories`` categories is scored by a CASE
    inside the macro; a wider one by a lookup in ``ilargi.category_weights``.
    The weights of every category are stored either way (the registry shows them).
    """

    def __init__(self, name: str, version: int, model: Any, inline_categories: int | None = None):
        self.name, self.version, self.model = name, version, model
        self.inline_categories = INLINE_CATEGORIES if inline_categories is None else inline_categories
        self.specs: list[ColumnSpec] = model.encoder_.specs_
        self.offsets = model.encoder_.offsets_
        self.weight_rows: list[tuple] = []

    # -- pieces --------------------------------------------------------------------------

    def _numeric(self, spec: ColumnSpec) -> str:
        value = f"CAST({quote_identifier(spec.name)} AS DOUBLE)"
        return f"coalesce({value}, {double(spec.mean)})" if self.model.encoder_.impute else value

    def _category_weight(self, spec: ColumnSpec, weights: np.ndarray, output: int) -> str:
        """The weight of the row's category for ``output`` (1-based), 0 for a category training never saw.

        ``weights`` holds one row per category (then NULL, if training saw it) and one column per output.
        """
        if spec.width > self.inline_categories:
            return self._category_lookup(spec, output)
        column = quote_identifier(spec.name)
        cases = [
            f"WHEN {quote_string(c)} THEN {double(w)}"
            for c, w in zip(spec.categories, weights[: len(spec.categories), output - 1])
        ]
        otherwise = "0.0"  # unseen categories weigh zero
        if spec.null_category:  # NULL matches no WHEN, so it reaches ELSE
            otherwise = f"CASE WHEN {column} IS NULL THEN {double(weights[-1, output - 1])} ELSE 0.0 END"
        if not cases:  # training saw only NULLs
            return f"({otherwise})"
        return f"(CASE CAST({column} AS VARCHAR) {' '.join(cases)} ELSE {otherwise} END)"

    def _category_lookup(self, spec: ColumnSpec, output: int) -> str:
        # The registry's columns are read qualified and renamed: a feature (a macro parameter) named like one of
        # them (model, category, ...) would otherwise be substituted into, or clash with, the subquery.
        return (
            f"coalesce((SELECT __ilargi_weights[{output}] FROM (SELECT w.model AS __ilargi_model, "
            "w.version AS __ilargi_version, w.feature AS __ilargi_feature, w.category AS __ilargi_category, "
            "w.weights AS __ilargi_weights FROM ilargi.category_weights w) "
            f"WHERE __ilargi_model = {quote_string(self.name)} AND __ilargi_version = {self.version} "
            f"AND __ilargi_feature = {quote_string(spec.name)} "
            f"AND __ilargi_category IS NOT DISTINCT FROM CAST({quote_identifier(spec.name)} AS VARCHAR)), 0.0)"
        )

    def _add_weights(self, spec: ColumnSpec, weights: np.ndarray) -> None:
        """One row per category (and the NULL category): ``weights[i]`` are the outputs of one-hot column i."""
        labels: list[str | None] = list(spec.categories) + ([None] if spec.null_category else [])
        for label, row in zip(labels, np.atleast_2d(weights)):
            self.weight_rows.append((self.name, self.version, spec.name, label, [float(v) for v in row]))

    def _columns(self, spec: ColumnSpec, j: int) -> slice:
        return slice(int(self.offsets[j]), int(self.offsets[j]) + spec.width)

    def linear_score(self) -> str:
        """intercept + sum of coef * feature, in the model's original units."""
        coef = np.asarray(self.model.coef_, dtype=float).ravel()
        terms = [double(self.model.intercept_)]
        for j, spec in enumerate(self.specs):
            if spec.kind == "numeric":
                terms.append(f"{double(coef[self.offsets[j]])} * {self._numeric(spec)}")
            elif spec.width:
                weights = coef[self._columns(spec, j)].reshape(-1, 1)
                self._add_weights(spec, weights)
                terms.append(self._category_weight(spec, weights, 1))
        return " + ".join(terms)

    def nearest_centroid(self) -> str:
        """Index (from 0) of the nearest centroid, by squared Euclidean distance."""
        centers = np.asarray(self.model.cluster_centers_, dtype=float)
        distances = []
        for k, center in enumerate(centers):
            terms = []
            for j, spec in enumerate(self.specs):
                if spec.kind == "numeric":
                    terms.append(f"power({self._numeric(spec)} - {double(center[self.offsets[j]])}, 2)")
                elif spec.width:
                    # (one_hot - c)^2 summed = sum(c^2) + (1 - 2 c_v) for the row's category v, if known.
                    c = center[self._columns(spec, j)]
                    weights = (1.0 - 2.0 * centers[:, self._columns(spec, j)]).T
                    if k == 0:
                        self._add_weights(spec, weights)
                    terms.append(f"{double(float(c @ c))} + {self._category_weight(spec, weights, k + 1)}")
            distances.append(" + ".join(terms) or "0.0")
        listed = ", ".join(f"({d})" for d in distances)
        # The comprehension binds the distance list once (written twice, DuckDB would compute it twice).
        # A NULL distance (a NULL numeric without imputation) gives NULL, not the nearest of the others.
        return (
            f"[CASE WHEN list_count(d) = {len(distances)} THEN list_position(d, list_min(d)) - 1 END "
            f"FOR d IN [[{listed}]]][1]"
        )

    # -- whole macros -------------------------------------------------------------------

    def statements(self) -> dict[str, str]:
        """``{macro name: CREATE OR REPLACE MACRO ...}`` for this model (none for NMF: its transform iterates)."""
        params = ", ".join(quote_identifier(s.name) for s in self.specs)
        algorithm = self.model.algorithm_
        bodies: dict[str, str] = {}
        if algorithm == "linear_regression":
            bodies[f"{self.name}_predict"] = self.linear_score()
        elif algorithm == "logistic_regression":
            score = self.linear_score()
            low, high = (double(c) for c in np.asarray(self.model.classes_, dtype=float))
            bodies[f"{self.name}_predict"] = f"0.5 * (1.0 + tanh(0.5 * ({score})))"  # P(classes_[1]), overflow-free
            # No ELSE: a NULL score (a NULL numeric without imputation) gives NULL, not the first class.
            bodies[f"{self.name}_predict_class"] = (
                f"CASE WHEN ({score}) > 0 THEN {high} WHEN ({score}) <= 0 THEN {low} END"
            )
        elif algorithm == "kmeans":
            bodies[f"{self.name}_predict"] = self.nearest_centroid()
        return {
            macro: f"CREATE OR REPLACE MACRO {quote_identifier(macro)}({params}) AS ({body})"
            for macro, body in bodies.items()
        }

    def weights_table(self) -> pa.Table:
        return pa.Table.from_pylist(
            [dict(zip(WEIGHTS_SCHEMA.names, row)) for row in self.weight_rows], schema=WEIGHTS_SCHEMA
        )


def prediction_sql(con: duckdb.DuckDBPyConnection, model: Any, query: str, column: str = "prediction") -> str:
    """``query`` with one more column: ``model``'s macro applied to its feature columns.

    The query selects the model's features (and may select the target), as
    for :func:`ilargi_db.predict`; the result scores every row natively in
    DuckDB, in parallel, through ``N_predict``.
    """
    macros = getattr(model, "macros_", None)
    if not macros:
        raise IlargiError("this model has no SQL macro: save it with ilargi_db.save_model (NMF has none).")
    names = [c.lower() for c in build_join_graph(con, query).feature_names]
    target = model.target_ if model.target_ is not None and model.target_.lower() in names else None
    graph = build_join_graph(con, query, target)
    model.encoder_.check_features(graph.feature_names)
    select = graph.select.copy()
    items = [item for i, item in enumerate(select.expressions) if i != graph.target_index]
    call = exp.Anonymous(this=macros[0], expressions=[item.unalias().copy() for item in items])  # a plain name
    select.set("expressions", [*select.expressions, exp.alias_(call, column, quoted=True)])
    return select.sql("duckdb")
