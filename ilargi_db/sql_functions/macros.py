"""A trained model as SQL: the ``N_predict`` macros and the category weights they look up.

A macro holds the whole model (coefficients or centroids, training means for
imputation) as DOUBLE literals in native SQL, so DuckDB scores rows in parallel
and any client can call it after a reconnect, without ilargi_db. A one-hot
feature with up to ``INLINE_CATEGORIES`` categories is a CASE inside the macro;
a wider one is looked up in ``ilargi.category_weights`` of the model's own
database with a scalar subquery, which DuckDB decorrelates into a hash join (no
giant CASE). Unseen categories (and NULL, unless training saw it) weigh zero, as
in the encoder. Categories compare byte for byte (``COLLATE "binary"``), as the
encoder does, whatever the column's or the session's collation. A numeric NaN
is missing, as NULL is in training.

A linear score is a sum of scalar terms written as a balanced tree, and
k-means takes one list of the numeric features to native ``list_distance``:
a model of thousands of features stays under DuckDB's expression depth limit
(1,000) and binds in about a second, and no expression is repeated (DuckDB's
common-subexpression pass takes time quadratic in repeated ones).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, ClassVar

import duckdb
import numpy as np
import pyarrow as pa
from sqlglot import exp

from ilargi_db.errors import IlargiError, speaking_of
from ilargi_db.metadata.scans import group_text
from ilargi_db.models.catalog import MacroForm, algorithm_facts
from ilargi_db.plan import build_join_graph, parse_training_query
from ilargi_db.plan.reserved import RESERVED_PREFIX, is_reserved
from ilargi_db.preprocess import ColumnSpec
from ilargi_db.sql_text import quote_identifier, quote_string

WEIGHTS_SCHEMA = pa.schema(
    [
        ("model", pa.string()),
        ("version", pa.int32()),
        ("feature", pa.string()),
        ("category", pa.string()),
        ("weights", pa.list_(pa.float64())),
    ]
)


def double(value: float) -> str:
    """A DOUBLE literal that reads back as exactly ``value`` (exponent form is DOUBLE, not DECIMAL, in DuckDB).

    >>> double(0.1)
    '1.0000000000000001e-01'
    """
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"a model constant is not finite ({value}); the model cannot be written as SQL.")
    return f"{value:.16e}"


def edge_literal(value: float) -> str:
    """A split's edge as an exact DOUBLE literal; an infinite one (the data can hold -inf and inf) as DuckDB's.

    >>> edge_literal(float("-inf")), edge_literal(0.5)
    ("'-infinity'::DOUBLE", '5.0000000000000000e-01')
    """
    if math.isinf(value):
        return "'infinity'::DOUBLE" if value > 0 else "'-infinity'::DOUBLE"
    return double(value)


# DuckDB's built-in functions the model macros call, each by its catalog name (``system.main.tanh``): a database's
# own macro of the same name (``CREATE MACRO tanh(x) AS 0.0``) would otherwise replace the built-in inside every
# model macro. Operators and list syntax (``a + b``, ``[a, b]``, ``l[i]``, ``[e FOR x IN l]``) bind to functions a
# macro can shadow too (``"+"``, ``list_value``, ``array_extract``, ``list_apply``), so the macros write them as
# calls. Comparisons, CASE, CAST, COLLATE, coalesce and IS [NOT] DISTINCT FROM are syntax, which nothing shadows.
MACRO_FUNCTIONS = frozenset(
    {
        "+",
        "-",
        "*",
        "/",
        "tanh",
        "exp",
        "isnan",
        "power",
        "list_value",
        "list_apply",
        "list_extract",
        "list_sum",
        "list_max",
        "list_min",
        "list_position",
        "list_count",
        "list_distance",
        "get_bit",  # a tree's split on a looked-up category reads one bit of its mask (tree_macros.category_mask)
        # a tree's leaf found from its leaf masks (tree_leaf_masks)
        "&",
        "xor",
        "bit_count",
        "error",  # a tree macro whose registry row is missing says so (tree_leaf_masks)
        # a TIMESTAMPTZ group's text (metadata.scans.group_text, written there qualified: it is below this module)
        "timezone",
        "regexp_replace",
    }
)
BUILT_INS = "system.main"  # the catalog and schema of DuckDB's built-in functions


def call(function: str, *arguments: str) -> str:
    """A call of DuckDB's built-in ``function`` by its catalog name, which no function of the database shadows.

    >>> call("+", "a", "b")
    'system.main."+"(a, b)'
    """
    if function not in MACRO_FUNCTIONS:  # every built-in a macro calls is listed (a test shadows each of them)
        raise ValueError(f"{function} is not in MACRO_FUNCTIONS")
    return f"{BUILT_INS}.{quote_identifier(function)}({', '.join(arguments)})"


def list_of(items: list[str]) -> str:
    """A SQL list of ``items`` (``[a, b]``, written as the built-in's call)."""
    return call("list_value", *items)


def element(items: str, position: str | int) -> str:
    """``items[position]`` (1-based; NULL out of range), written as the built-in's call."""
    return call("list_extract", items, str(position))


def bound(variable: str, value: str, body: str) -> str:
    """``body`` with ``variable`` bound once to ``value`` (``[body FOR variable IN [value]][1]``): DuckDB computes
    an expression written twice twice, a lambda's parameter once."""
    return element(call("list_apply", list_of([value]), f"lambda {variable}: {body}"), 1)


# The macros a model of each form (its catalog entry's ``macro``) may create, by their name's suffix after the
# model's name: what the registry drops or replaces of a model is derived from these, never from the row's own list.
PREDICT, PREDICT_CLASS, DECISION = "_predict", "_predict_class", "_decision"  # N_predict, ...: the writers' names
MACRO_SUFFIXES: dict[MacroForm | None, tuple[str, ...]] = {
    MacroForm.LINEAR: (PREDICT,),
    MacroForm.LOGISTIC: (PREDICT, PREDICT_CLASS),
    MacroForm.MARGIN: (PREDICT, DECISION),
    MacroForm.NEAREST_CENTROID: (PREDICT,),
    MacroForm.TREES: (PREDICT, PREDICT_CLASS),
    None: (),  # no macro (NMF: its transform iterates)
}


def model_macro_names(name: str, algorithm: str) -> frozenset[str]:
    """The macros, lower case, that model ``name`` of ``algorithm`` may have created (none for an unknown one)."""
    try:
        kind = algorithm_facts(algorithm).macro
    except (IlargiError, KeyError, TypeError, ValueError):
        return frozenset()
    return frozenset(f"{name}{suffix}".lower() for suffix in MACRO_SUFFIXES.get(kind, ()))


# A target type as DuckDB spells it (BOOLEAN, INTEGER, DECIMAL(18,3)): safe to paste into a CAST.
SQL_TYPE = re.compile(r"[A-Z][A-Z0-9_]*(\(\d+(, ?\d+)?\))?")
INLINE_CATEGORIES = 64  # up to this many categories a CASE beats the lookup join (docs/benchmarks.md)
GROUPED_INLINE_CATEGORIES = np.iinfo(np.int64).max  # a per-group macro writes every feature's categories inline


def category_text(expression: str) -> str:
    """``expression`` as the text a category is compared by: byte for byte, as the encoder and ``predict`` compare.

    A COLLATE NOCASE column keeps its collation through a CAST, and ``SET default_collation`` applies to every
    comparison without its own: either would make 'a' match a category 'A' in the macro and not in ``predict``.

    >>> category_text('"c"')
    'CAST("c" AS VARCHAR) COLLATE "binary"'
    """
    return f'CAST({expression} AS VARCHAR) COLLATE "binary"'


def double_list(values: np.ndarray) -> str:
    """A DOUBLE[] literal.

    >>> double_list(np.array([0.5, -2.0]))
    'system.main."list_value"(5.0000000000000000e-01, -2.0000000000000000e+00)'
    """
    return list_of([double(v) for v in values])


def balanced_sum(terms: list[str]) -> str:
    """``terms`` added as a balanced tree of depth log2(n): a left-deep sum of 1,000 terms cannot be bound.

    >>> balanced_sum(["a", "b", "c"])
    'system.main."+"(a, system.main."+"(b, c))'
    >>> balanced_sum([])
    '0.0'
    """
    if not terms:
        return "0.0"
    if len(terms) == 1:
        return terms[0]
    half = len(terms) // 2
    return call("+", balanced_sum(terms[:half]), balanced_sum(terms[half:]))


def class_labels(model: Any) -> str:
    """A classifier's classes as a SQL list, typed like the target column."""
    # The score written once per macro (twice, DuckDB would bind and compute it twice); a NULL score (a missing
    # numeric without imputation) gives a NULL index, so NULL, not the first class.
    classes = np.asarray(model.classes_)
    if classes.dtype.kind in "biuf":  # numbers, or a BOOLEAN target's False and True
        labels = [double(c) for c in classes.astype(float)]
    else:  # text labels
        labels = [quote_string(str(c)) for c in classes]
    target_type = model.target_type_
    if target_type and SQL_TYPE.fullmatch(target_type):  # the class as the target column has it
        labels = [f"CAST({c} AS {target_type})" for c in labels]
    return list_of(labels)


def multinomial_bodies(name: str, model: Any, listed: str) -> dict[str, str]:
    """A multinomial classifier's macro bodies from ``listed``, the SQL list of its k class scores: ``N_predict`` the
    list of the k probabilities (softmax, in ``classes_`` order), ``N_predict_class`` the class of the largest
    score. The list is bound once, not computed again per use."""
    k = len(model.classes_)
    largest = call("list_max", "__ilargi_s")
    exps = call("list_apply", "__ilargi_s", f"lambda __ilargi_v: {call('exp', call('-', '__ilargi_v', largest))}")
    shares = call(
        "list_apply", "__ilargi_es", f"lambda __ilargi_e: {call('/', '__ilargi_e', call('list_sum', '__ilargi_es'))}"
    )
    # a NULL score (a missing numeric without imputation) gives NULL, not the class of the others' largest
    chosen = element(class_labels(model), call("list_position", "__ilargi_s", largest))
    return {
        f"{name}{PREDICT}": bound("__ilargi_es", bound("__ilargi_s", listed, exps), shares),
        f"{name}{PREDICT_CLASS}": bound(
            "__ilargi_s", listed, f"CASE WHEN {call('list_count', '__ilargi_s')} = {k} THEN {chosen} END"
        ),
    }


def share_bodies(name: str, model: Any, score: str) -> dict[str, str]:
    """A forest's macro bodies from its classes' mean shares: for two classes ``score`` is ``classes_[1]``'s
    (``N_predict`` it, ``N_predict_class`` the class whose share is above one half); for more, the SQL list of the
    k shares (``N_predict`` them normalized to sum to 1, in ``classes_`` order; ``N_predict_class`` the largest's)."""
    labels = class_labels(model)
    if len(model.classes_) == 2:
        return {
            f"{name}{PREDICT}": score,
            f"{name}{PREDICT_CLASS}": element(labels, call("+", f"CAST(({score}) > 0.5 AS INTEGER)", "1")),
        }
    shares = call(
        "list_apply", "__ilargi_s", f"lambda __ilargi_v: {call('/', '__ilargi_v', call('list_sum', '__ilargi_s'))}"
    )
    chosen = element(labels, call("list_position", "__ilargi_s", call("list_max", "__ilargi_s")))
    k = len(model.classes_)
    return {
        f"{name}{PREDICT}": bound("__ilargi_s", score, shares),
        f"{name}{PREDICT_CLASS}": bound(
            "__ilargi_s", score, f"CASE WHEN {call('list_count', '__ilargi_s')} = {k} THEN {chosen} END"
        ),
    }


def binary_bodies(name: str, model: Any, score: str) -> dict[str, str]:
    """A binary classifier's macro bodies from its log-odds ``score``: ``N_predict`` the probability of
    ``classes_[1]``, ``N_predict_class`` the class, typed like the target column."""
    half = call("*", "0.5", call("+", "1.0", call("tanh", call("*", "0.5", score))))  # P(classes_[1]), no overflow
    return {f"{name}{PREDICT}": half, f"{name}{PREDICT_CLASS}": chosen_class(model, score)}


# A classifier's macro bodies from its scores, by how its loss makes them probabilities (Loss.probability).
CLASS_BODIES = {"logistic": binary_bodies, "softmax": multinomial_bodies, "shares": share_bodies}


def tree_bodies(name: str, model: Any, score: str) -> dict[str, str]:
    """A tree ensemble's macro bodies from its raw ``score``, as its loss reads it: a classifier's probabilities
    and class, or a regression's prediction through the inverse link."""
    loss = model.loss_
    if loss.classifies:
        return CLASS_BODIES[loss.probability](name, model, score)
    return {f"{name}{PREDICT}": score if loss.inverse_link is None else call(loss.inverse_link, score)}


class TreeScoreWriter:
    """What both tree writers share (nested ``CASE``s, :mod:`.tree_macros`; leaf masks, :mod:`.tree_leaf_masks`):
    the macros of a model's raw score over its binned features, as its loss reads the score."""

    name: str
    model: Any
    database: str
    bins: list

    def score(self) -> str:
        """The raw score's SQL (each writer's own)."""
        raise NotImplementedError

    def statements(self) -> dict[str, str]:
        """``{macro name: CREATE OR REPLACE MACRO ...}``: the prediction, and the class for classification."""
        return macro_statements(self.database, [b.name for b in self.bins], self.bodies())

    def bodies(self) -> dict[str, str]:
        """``{macro name: its body}``."""
        return tree_bodies(self.name, self.model, self.score())


def chosen_class(model: Any, score: str) -> str:
    """The class a binary ``score`` chooses: ``classes_[1]`` where it is positive, typed like the target column."""
    return element(class_labels(model), call("+", f"CAST(({score}) > 0 AS INTEGER)", "1"))


class MacroWriter:
    """Writes the SQL of one model version: macro bodies and the category-weight rows they read.

    A feature with at most ``inline_categories`` categories is scored by a CASE
    inside the macro; a wider one by a lookup in ``database``'s
    ``ilargi.category_weights`` (qualified: a macro called through ATTACH would
    otherwise read the caller's registry). The weights of every category are
    stored either way (the registry shows them).
    """

    def __init__(self, name: str, version: int, model: Any, database: str, inline_categories: int | None = None):
        self.name, self.version, self.model, self.database = name, version, model, database
        self.inline_categories = INLINE_CATEGORIES if inline_categories is None else inline_categories
        self.specs: list[ColumnSpec] = model.encoder_.specs_
        self.offsets = model.encoder_.offsets_
        # Per one-hot feature: its name, its categories (then None for NULL) and their weights, one row each.
        # Kept as arrays and written as columns: a Python object per weight would cost more than the model.
        self.weight_parts: list[tuple[str, list[str | None], np.ndarray]] = []

    # -- pieces --------------------------------------------------------------------------

    def _numeric_value(self, spec: ColumnSpec) -> str:
        """The feature as DOUBLE; NULL and NaN are both missing (training reads NULL as NaN): the mean, or NULL."""
        column = quote_identifier(spec.name)
        missing = double(spec.mean) if self.model.encoder_.impute else "NULL"
        # NOT isnan(NULL) is NULL, so NULL reaches ELSE too. THEN says TRY_CAST only to differ from WHEN's CAST
        # (which has already refused a value that is no number): DuckDB's common-subexpression pass takes time
        # quadratic in repeated casts, seconds to bind a model of a few thousand INTEGER or DECIMAL features.
        present = call("isnan", f"CAST({column} AS DOUBLE)")
        return f"CASE WHEN NOT {present} THEN TRY_CAST({column} AS DOUBLE) ELSE {missing} END"

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
        return f"(CASE {category_text(column)} {' '.join(cases)} ELSE {otherwise} END)"

    def _category_lookup(self, spec: ColumnSpec, output: int) -> str:
        # The registry's columns are read qualified and renamed: a feature (a macro parameter) named like one of
        # them (model, category, ...) would otherwise be substituted into, or clash with, the subquery.
        return (
            f"coalesce((SELECT {element('__ilargi_weights', output)} FROM (SELECT w.model AS __ilargi_model, "
            "w.version AS __ilargi_version, w.feature AS __ilargi_feature, w.category AS __ilargi_category, "
            f"w.weights AS __ilargi_weights FROM {quote_identifier(self.database)}.ilargi.category_weights w) "
            f"WHERE __ilargi_model = {quote_string(self.name)} AND __ilargi_version = {self.version} "
            f"AND __ilargi_feature = {quote_string(spec.name)} "
            f"AND {category_text('__ilargi_category')} IS NOT DISTINCT FROM "
            f"{category_text(quote_identifier(spec.name))}), 0.0)"
        )

    def _add_weights(self, spec: ColumnSpec, weights: np.ndarray) -> None:
        """One row per category (and the NULL category): ``weights[i]`` are the outputs of one-hot column i."""
        labels: list[str | None] = list(spec.categories) + ([None] if spec.null_category else [])
        self.weight_parts.append((spec.name, labels, np.atleast_2d(np.asarray(weights, dtype=np.float64))))

    def _columns(self, spec: ColumnSpec, j: int) -> slice:
        return slice(int(self.offsets[j]), int(self.offsets[j]) + spec.width)

    def linear_score(self) -> str:
        """intercept + sum of coef * feature, in the model's original units."""
        return self.linear_scores()[0]

    def linear_scores(self) -> list[str]:
        """One linear score per row of a 2-D ``coef_`` (a multinomial model's k classes), or the one score."""
        coef = np.atleast_2d(np.asarray(self.model.coef_, dtype=float))
        intercept = np.atleast_1d(np.asarray(self.model.intercept_, dtype=float))
        terms: list[list[str]] = [[double(b)] for b in intercept]
        for j, spec in enumerate(self.specs):
            if spec.kind == "numeric":
                for out, row in enumerate(coef):
                    terms[out].append(call("*", double(row[self.offsets[j]]), self._numeric_value(spec)))
            elif spec.width:
                weights = coef[:, self._columns(spec, j)].T  # a row per category, a column per score
                self._add_weights(spec, weights)
                for out in range(len(coef)):
                    terms[out].append(self._category_weight(spec, weights, out + 1))
        return [balanced_sum(t) for t in terms]

    def nearest_centroid(self) -> str:
        """Index (from 0) of the nearest centroid, by squared Euclidean distance (on the columns divided by
        ``feature_scale_`` when k-means trained standardized: its centers and each value scaled alike)."""
        scale = getattr(self.model, "feature_scale_", None)
        scale = np.ones(self.model.n_features_in_) if scale is None else np.asarray(scale, dtype=float)
        centers = np.asarray(self.model.cluster_centers_, dtype=float) / scale
        n_clusters = len(centers)
        numeric_part = list_of(["0.0"] * n_clusters)
        if numeric := [j for j, spec in enumerate(self.specs) if spec.kind == "numeric"]:
            # One list of the numeric features, built once, and one native list_distance per centroid: faster
            # than scalar terms, and no feature written once per centroid (DuckDB's common-subexpression pass
            # takes time quadratic in repeated expressions). Without imputation a missing numeric makes the
            # distances NULL (list_distance would refuse the NULL element).
            values = [self._scaled(self._numeric_value(self.specs[j]), scale[self.offsets[j]]) for j in numeric]
            squared = [
                call("power", call("list_distance", "__ilargi_x", double_list(c[self.offsets[numeric]])), "2")
                for c in centers
            ]
            numeric_part = list_of(squared)
            if not self.model.encoder_.impute:
                numeric_part = f"CASE WHEN {call('list_count', '__ilargi_x')} = {len(numeric)} THEN {numeric_part} END"
            numeric_part = bound("__ilargi_x", list_of(values), numeric_part)
        categorical: list[list[str]] = [[] for _ in centers]
        for j, spec in enumerate(self.specs):
            if spec.kind == "categorical" and spec.width:
                # (one_hot/s - c)^2 summed = sum(c^2) + (1/s_v^2 - 2 c_v/s_v) for the row's category v, if known.
                s = scale[self._columns(spec, j)]
                weights = (1.0 / s**2 - 2.0 * centers[:, self._columns(spec, j)] / s).T
                self._add_weights(spec, weights)
                for k, center in enumerate(centers):
                    c = center[self._columns(spec, j)]
                    categorical[k] += [double(float(c @ c)), self._category_weight(spec, weights, k + 1)]
        categorical_part = list_of([balanced_sum(terms) for terms in categorical])
        # Comprehensions bind each list once (written twice, DuckDB would compute it twice); the category lookups
        # stay outside them (DuckDB allows no subquery in a lambda). A NULL distance (a missing numeric without
        # imputation) gives NULL, not the nearest of the others.
        distances = list_of(
            [
                call("+", element(element("__ilargi_p", 1), k), element(element("__ilargi_p", 2), k))
                for k in range(1, n_clusters + 1)
            ]
        )
        position = call("list_position", "__ilargi_d", call("list_min", "__ilargi_d"))
        nearest = bound(
            "__ilargi_d",
            distances,
            f"CASE WHEN {call('list_count', '__ilargi_d')} = {n_clusters} THEN {call('-', position, '1')} END",
        )
        return bound("__ilargi_p", list_of([numeric_part, categorical_part]), nearest)

    @staticmethod
    def _scaled(value: str, scale: float) -> str:
        """``value`` divided by its training scale (left as it is when the scale is 1)."""
        return value if scale == 1.0 else call("/", value, double(scale))

    # -- whole macros -------------------------------------------------------------------

    def statements(self) -> dict[str, str]:
        """``{macro name: CREATE OR REPLACE MACRO ...}`` for this model (none for NMF: its transform iterates)."""
        return macro_statements(self.database, [s.name for s in self.specs], self.bodies())

    def bodies(self) -> dict[str, str]:
        """``{macro name: its body}``: the SQL expression each macro computes from the features."""
        form = algorithm_facts(self.model.algorithm_).macro
        return self.FORMS[form](self) if form is not None else {}

    def linear_bodies(self) -> dict[str, str]:
        return {f"{self.name}{PREDICT}": self.linear_score()}

    def logistic_bodies(self) -> dict[str, str]:
        if np.ndim(self.model.coef_) == 2:  # more than two classes
            return multinomial_bodies(self.name, self.model, list_of(self.linear_scores()))
        return binary_bodies(self.name, self.model, self.linear_score())

    def margin_bodies(self) -> dict[str, str]:
        """An SVM's class (its predict) and its score (its decision_function)."""
        score = self.linear_score()
        return {f"{self.name}{PREDICT}": chosen_class(self.model, score), f"{self.name}{DECISION}": score}

    def nearest_centroid_bodies(self) -> dict[str, str]:
        return {f"{self.name}{PREDICT}": self.nearest_centroid()}

    # The bodies of each macro form this writer writes (trees have writers of their own: registry.macro_writer).
    FORMS: ClassVar[dict[MacroForm, Callable[[MacroWriter], dict[str, str]]]] = {
        MacroForm.LINEAR: linear_bodies,
        MacroForm.LOGISTIC: logistic_bodies,
        MacroForm.MARGIN: margin_bodies,
        MacroForm.NEAREST_CENTROID: nearest_centroid_bodies,
    }

    def registry_rows(self) -> dict[str, pa.Table]:
        """The rows the macros read, by registry table: the category weights (:meth:`weights_table`)."""
        return {"category_weights": self.weights_table()}

    def weights_table(self) -> pa.Table:
        """One row per category of every looked-up or inlined feature (:data:`WEIGHTS_SCHEMA`), built as columns."""
        parts = self.weight_parts
        if not parts:
            return WEIGHTS_SCHEMA.empty_table()
        rows = np.array([len(labels) for _, labels, _ in parts], dtype=np.int64)
        n = int(rows.sum())
        features = pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(len(parts), dtype=np.int32), rows)), pa.array([f for f, _, _ in parts])
        )
        lengths = np.concatenate([np.full(len(labels), w.shape[1], dtype=np.int64) for _, labels, w in parts])
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = np.concatenate([w[: len(labels)].ravel() for _, labels, w in parts])
        columns = [
            pa.repeat(pa.scalar(self.name, pa.string()), n),
            pa.repeat(pa.scalar(self.version, pa.int32()), n),
            features.cast(pa.string()),
            pa.array([label for _, labels, _ in parts for label in labels], type=pa.string()),
            pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)),
        ]
        return pa.Table.from_arrays(columns, schema=WEIGHTS_SCHEMA)


MACRO_SCHEMA = "main"  # a model's macros live in its database's main schema, whatever the session's search path


def qualified_macro(database: str, macro: str) -> str:
    """Where model macro ``macro`` of ``database``'s registry lives: one place, whatever schema is in use, so that
    retraining or dropping the model reaches the same macro (and never a function of another schema)."""
    return f"{quote_identifier(database)}.{MACRO_SCHEMA}.{quote_identifier(macro)}"


def macro_marker(name: str) -> str:
    """The comment on every macro of model ``name``: what tells its macros from a user's function of the same name
    (a registry row is not trusted to say which functions are the model's)."""
    return f"ilargi_db model {name}"


def macro_statements(database: str, parameters: list[str], bodies: dict[str, str]) -> dict[str, str]:
    """``{macro name: CREATE OR REPLACE MACRO database.main.name(parameters) AS (body)}``."""
    params = ", ".join(quote_identifier(p) for p in parameters)
    return {
        macro: f"CREATE OR REPLACE MACRO {qualified_macro(database, macro)}({params}) AS ({body})"
        for macro, body in bodies.items()
    }


def group_label(group_by: str, group_type: str | None) -> str:
    """The SQL of a row's group as a model per group labels it (``GroupedModel.models_``'s keys): its value cast
    as training cast it (1 is '1', not '1.0') and written as training wrote it (in any time zone), compared byte
    for byte."""
    group = quote_identifier(group_by)
    if group_type and SQL_TYPE.fullmatch(group_type):
        group = f"CAST({group} AS {group_type})"
    return category_text(group_text(group, group_type))


class GroupedMacroWriter:
    """The macros of a model per group: each group's model's body, chosen by the group column (the macros' last
    parameter) in one CASE; a group no model was trained for, or NULL, gives NULL. Linear models, k-means, and
    trees of more than 63 leaves (smaller trees: ``tree_leaf_masks.GroupedTreeLeafMaskWriter``).

    Each group's categories are written inline (its CASEs; a tree's IN lists), so no lookup is used: the table's
    rows are keyed by model and feature, not by group, and a tree's per-row lookup, a subquery, would be planned
    once per group on every query.
    """

    def __init__(self, name: str, version: int, model: Any, database: str, writer: type) -> None:
        self.name, self.group_by, self.group_type, self.database = name, model.group_by_, model.group_type_, database
        self.specs = model.encoder_.specs_
        self.writers = {
            label: writer(name, version, one, database, inline_categories=GROUPED_INLINE_CATEGORIES)
            for label, one in model.models_.items()
        }

    def statements(self) -> dict[str, str]:
        group = group_label(self.group_by, self.group_type)
        bodies = {label: writer.bodies() for label, writer in self.writers.items()}
        macros = next(iter(bodies.values()))
        if any(set(found) != set(macros) for found in bodies.values()):  # checked when fitted and when read back
            raise IlargiError("the groups' models have different macros: train them again with one objective.")
        dispatched = {
            macro: f"CASE {group} "
            + " ".join(f"WHEN {quote_string(label)} THEN ({found[macro]})" for label, found in bodies.items())
            + " END"
            for macro in macros
        }
        return macro_statements(self.database, [*(s.name for s in self.specs), self.group_by], dispatched)

    def registry_rows(self) -> dict[str, pa.Table]:
        return {}  # every category inline


def prediction_sql(con: duckdb.DuckDBPyConnection, model: Any, query: str, column: str = "prediction") -> str:
    """``query`` with one more column: ``model``'s macro applied to its feature columns.

    The query selects the model's features (and may select the target), as
    for :func:`ilargi_db.predict`; the result scores every row natively in
    DuckDB, in parallel, through ``N_predict``. A query with a LIMIT is
    limited first, then scored, in its order (:func:`scored_after_limit`).
    """
    macros = model.macros_
    if not macros:
        raise IlargiError("this model has no SQL macro: save it with ilargi_db.save_model (NMF has none).")
    group_by = getattr(model, "group_by_", None)  # a model per group: the group column is the macro's last argument
    with speaking_of("the query to predict on"):
        scored = model.scoring_query(query)
        names = [c.lower() for c in build_join_graph(con, scored.query, read_once=True).feature_names]
        target = model.target_ if model.target_ is not None and model.target_.lower() in names else None
        graph = build_join_graph(con, scored.query, target, group_by, read_once=True)  # DuckDB scores in one pass
    model.encoder_.check_features(graph.feature_names)
    planned = graph.select.expressions
    items = [item for i, item in enumerate(planned) if i not in (graph.target_index, graph.group_index)]
    if graph.group_index is not None:
        items.append(planned[graph.group_index])
    # Every column the query selects stays, in its order (an id beside the prediction); the macro reads the features.
    if scored.kept_names or scored.query != query:
        # The query as written (the planned one holds only the model's columns, and names sources the query does not,
        # such as an unaliased subquery's src1): the macro reads each feature as the query writes it.
        select = parse_training_query(query)
        written = {e.alias_or_name.lower(): e for e in select.expressions if e.alias_or_name}
        arguments = [written.get(item.alias_or_name.lower(), item).unalias().copy() for item in items]
    else:
        select = graph.select.copy()
        arguments = [item.unalias().copy() for item in items]
    if limits_before_scoring(select, column):
        return scored_after_limit(select, macros[0], [item.alias_or_name for item in items], column)
    call = exp.Anonymous(this=macros[0], expressions=arguments)  # a plain name
    select.set("expressions", [*select.expressions, exp.alias_(call, column, quoted=True)])
    return select.sql("duckdb", normalize_functions=False)  # the macro's name as created (sqlglot upper-cases)


def limits_before_scoring(select: exp.Select, column: str) -> bool:
    """Whether :func:`prediction_sql` scores ``select``'s rows after its LIMIT (:func:`scored_after_limit`): it has
    one, and each column it selects is a column or an alias whose name DuckDB gives it as is, named once and not
    with the reserved prefix, nor is the prediction's ``column``."""
    if select.args.get("limit") is None:
        return False
    if not all(isinstance(e, (exp.Column, exp.Alias)) for e in select.expressions):
        return False  # DuckDB names an expression by its own text (CAST(t.x AS DOUBLE)), not as sqlglot does
    names = [e.alias_or_name.lower() for e in select.expressions]
    if "*" in names or len(set(names)) < len(names):
        return False
    return not any(is_reserved(name) for name in [*names, column])


def scored_after_limit(select: exp.Select, macro: str, arguments: list[str], column: str) -> str:
    """``select``'s rows, then the macro over its columns named ``arguments``, in ``select``'s order.

    A tree macro computes its rows' codes in a subquery (a wide linear model its categories' weights), which DuckDB
    decorrelates over every row of the FROM around it, before any LIMIT: around the query's own rows, a LIMIT 10 of
    1M rows scores 10 rows, not 1M (docs/benchmarks.md). The join of that decorrelation does not keep the rows'
    order, so each row's position is numbered before it and ordered by after."""
    position = exp.to_identifier(f"{RESERVED_PREFIX}position")
    call = exp.Anonymous(this=macro, expressions=[exp.column(name, quoted=True) for name in arguments])
    numbered = (
        exp.select("*", exp.alias_(exp.Window(this=exp.RowNumber()), position))
        .from_(exp.Subquery(this=select.copy(), alias=exp.TableAlias(this=exp.to_identifier(f"{RESERVED_PREFIX}rows"))))
        .subquery(f"{RESERVED_PREFIX}numbered")
    )
    scored = (
        exp.select(exp.Star(except_=[exp.column(position)]), exp.alias_(call, column, quoted=True))
        .from_(numbered)
        .order_by(exp.column(position))
    )
    return scored.sql("duckdb", normalize_functions=False)  # the macro's name as created
