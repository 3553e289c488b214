"""The algorithms ilargi_db trains and their facts, in one table.

Everything that differs per algorithm outside its estimator reads this table: whether it needs a
target, which solvers a plan may pick, the solvers' iteration defaults, the width of the iterate,
what the registry stores and which form of SQL macro scores it (the estimators themselves say how they
report their metrics and whether they start from an earlier model: models/algorithm.py). Importing it is
light (no scikit-learn): the command line lists the algorithms without loading the models, which
load on first use.
"""

from __future__ import annotations

import importlib
import inspect
import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ilargi_db.backend import BACKENDS
from ilargi_db.errors import IlargiError, spell, worded


class Choice(str, Enum):
    """A name from a fixed set that is also its plain string: equal to it, hashed, printed and in JSON as it."""

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__
    __repr__ = str.__repr__  # 'factorized', as the plain string it stands for (a model's strategy_ reads the same)


class Strategy(Choice):
    """How training reads the data: the normalized matrix over the sources, or the join DuckDB builds."""

    FACTORIZED = "factorized"
    MATERIALIZED = "materialized"


AUTO = "auto"  # a setting left to ilargi_db (the strategy, the backend, a solver)
STRATEGIES = tuple(Strategy)  # the strategies a plan runs
STRATEGY_CHOICES = (AUTO, *STRATEGIES)  # what a caller may ask for


class Placement(Choice):
    """Where the training rows are while the model fits."""

    MEMORY = "memory"  # read once, resident
    STREAMED = "streamed"  # the fact read from DuckDB in row partitions on every pass
    DISTRIBUTED = "distributed"  # partitions held by a Dask cluster's workers


class SolverName(Choice):
    """How an estimator fits; the values its ``solver`` parameter takes (where it has one)."""

    NORMAL = "normal"  # the normal equations through the factorized X^T X (Cholesky)
    CG = "cg"  # conjugate gradients on the normal equations
    GD = "gd"  # accelerated gradient descent
    LBFGS = "lbfgs"  # scipy's L-BFGS over factorized gradients
    NEWTON = "newton"  # Newton steps with the factorized Hessian X^T D X
    LLOYD = "lloyd"  # k-means' Lloyd iterations
    MU = "mu"  # NMF's multiplicative updates
    HISTOGRAM = "histogram"  # boosted trees grown from per-node histograms of (gradient, hessian)
    DUHL = "duhl"  # primal-dual coordinate descent, the row partitions of largest duality gap held (models/duhl.py)


class Rows(Choice):
    """What an algorithm's training reads, and so which readers, encoder and kernels serve it."""

    MATRIX = "matrix"  # one-hot, imputed columns: a normalized matrix, linear algebra over it
    BINS = "bins"  # each feature's bin codes (trees)


class MacroForm(Choice):
    """How a SQL macro scores an algorithm's model (``sql_functions/macros.py`` writes each form)."""

    LINEAR = "linear"  # x . w + b
    LOGISTIC = "logistic"  # its probability and class (one score per class past two)
    MARGIN = "margin"  # an SVM: its class from the score's sign, and the score
    NEAREST_CENTROID = "nearest_centroid"  # k-means: the closest centre
    TREES = "trees"  # the sum of the trees' leaves (through the loss's link)


class Penalty(Choice):
    """How an algorithm's L2 penalty is set, and what it is in DuHL's objective 1/n sum loss + lambda/2 ||w||^2."""

    ALPHA = "alpha"  # ridge's strength: ||y - Xw - b||^2 + alpha ||w||^2 is 2n times it with lambda = alpha / n
    C = "C"  # its inverse: 1/2 ||w||^2 + C sum loss is C n times it with lambda = 1 / (C n)

    def strength(self, params: dict[str, Any], n_rows: int) -> float:
        """lambda for ``params`` over ``n_rows`` rows (0: none, and no dual solver applies)."""
        n = max(int(n_rows), 1)
        if self is Penalty.ALPHA:
            return float(params.get("alpha", 0.0)) / n
        return 1.0 / (float(params.get("C", 1.0)) * n) if params.get("penalty", "l2") == "l2" else 0.0

    @property
    def fix(self) -> str:
        """What gives a model a positive penalty, in the caller's terms."""
        if self is Penalty.ALPHA:
            return f"alpha above 0 (ridge, e.g. {spell('alpha', 1.0)})"
        return spell("penalty", "l2")


@dataclass(frozen=True)
class Solver:
    """One way an algorithm's estimator fits: its iteration defaults and what it typically needs."""

    name: SolverName
    max_iter: int = 1  # the estimator's default (1: a direct solver)
    tol: float = 0.0  # the estimator's default tolerance
    typical_iterations: float = 1.0  # iterations to converge at the default tolerance, in the benchmarks' runs
    forms_gram: bool = False  # forms a dense d x d matrix (bounded by max_gram_bytes)
    needs_penalty: bool = False  # solves the dual: only with a positive L2 penalty (see l2_penalty)
    # its iterations depend on where the rows are (DuHL: all in one block in memory, partitions streamed):
    # learned apart for streamed runs
    iterations_by_placement: bool = False

    @property
    def iterative(self) -> bool:
        return self.max_iter > 1


@dataclass(frozen=True)
class Algorithm:
    """One algorithm: its estimator class and the facts the rest of the pipeline needs."""

    name: str
    estimator: str  # class name in ilargi_db.models
    supervised: bool
    solvers: tuple[Solver, ...]  # what a plan may pick when the caller leaves the choice open
    solver_parameter: str | None = None  # the parameter the plan sets when the caller leaves it at "auto"
    width_parameter: str | None = None  # the parameter giving the iterate's columns (clusters, components)
    default_width: int = 1
    fitted: tuple[str, ...] = ()  # learned state the registry stores to predict again
    macro: MacroForm | None = None  # how a SQL macro scores it (None: no macro)
    reads: Rows = Rows.MATRIX  # its training rows
    iterations_parameter: str = "max_iter"  # the parameter bounding its iterations
    # the parameter without which ``tol`` never stops it early (boosting's early_stopping; None: tol alone does)
    early_stopping_parameter: str | None = None
    penalty: Penalty | None = None  # how its L2 penalty is set
    standardizes: bool = False  # train(..., standardize=True) fits it on standardized columns
    optional_fitted: tuple[str, ...] = ()  # of ``fitted``, what only some fits learn (a record may lack it)

    def solver(self, name: str) -> Solver:
        """The named solver's facts (any solver the estimator accepts, not only the plan's candidates)."""
        for s in (*self.solvers, *EXTRA_SOLVERS.get(self.name, ())):
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def solver_names(self) -> tuple[SolverName, ...]:
        """Every solver the estimator accepts: the plan's candidates and those only a caller names."""
        return tuple(s.name for s in (*self.solvers, *EXTRA_SOLVERS.get(self.name, ())))

    def width(self, params: dict[str, Any]) -> int:
        """Columns of the iterate: clusters for k-means, components for NMF, 1 for linear models."""
        return int(params.get(self.width_parameter, self.default_width)) if self.width_parameter else 1

    def estimator_class(self) -> type:
        return getattr(importlib.import_module("ilargi_db.models"), self.estimator)


def duhl(max_iter: int, tol: float, typical: float) -> Solver:
    """DuHL with an estimator's defaults. An iteration: an epoch's worth of coordinate steps on the working
    set, then a pass refreshing every row's duality gap (the certificate); ``tol`` relative to the gap at
    the start. Typical counts measured on small stars, in memory, at the defaults (28-46 for ridge, 8-47 for
    logistic regression, 51 for the SVM); the plan learns this machine's from the runs."""
    return Solver(SolverName.DUHL, max_iter, tol, typical, needs_penalty=True, iterations_by_placement=True)


DUHL_HELD_PARTITIONS = 2  # a streamed job's budget holds two partitions (one computing, one read): DuHL's room


# DuHL steps through a row's stored entries where they fill at most this share of its columns (a one-hot
# encoding's, even standardized: models/duhl.SparseRows); denser rows it holds dense.
DUHL_SPARSE_DENSITY = 0.5


def duhl_reads_entries(entries_per_row: float, columns: int) -> bool:
    """Whether DuHL holds rows of ``entries_per_row`` stored entries out of ``columns`` as their entries."""
    return entries_per_row <= DUHL_SPARSE_DENSITY * max(columns, 1)


def duhl_row_bytes(entries_per_row: float, columns: int) -> float:
    """The bytes DuHL holds a row in: each stored entry's value and column, and a row's three numbers (where
    the row is held as its entries), or ``columns`` doubles."""
    return 12.0 * entries_per_row + 32.0 if duhl_reads_entries(entries_per_row, columns) else 8.0 * columns


def duhl_working_set(partitions: int, room_bytes: float, dense_partition_bytes: float) -> int:
    """How many row partitions DuHL holds (dense) in ``room_bytes``: at least one, at most all."""
    fitting = int(room_bytes // max(dense_partition_bytes, 1.0))
    return max(1, min(partitions, fitting))


CATALOG: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm(
            "linear_regression",
            "LinearRegression",
            supervised=True,
            solvers=(
                Solver(SolverName.NORMAL, forms_gram=True),
                Solver(SolverName.CG, 1000, 1e-6, 60.0),
                duhl(1000, 1e-6, 40.0),
            ),
            solver_parameter="solver",
            fitted=("coef_", "intercept_"),
            macro=MacroForm.LINEAR,
            penalty=Penalty.ALPHA,
            standardizes=True,
        ),
        Algorithm(
            "logistic_regression",
            "LogisticRegression",
            supervised=True,
            solvers=(Solver(SolverName.LBFGS, 100, 1e-4, 25.0),),
            fitted=("coef_", "intercept_", "classes_"),
            macro=MacroForm.LOGISTIC,
            penalty=Penalty.C,
            standardizes=True,
        ),
        Algorithm(
            "linear_svc",
            "LinearSVC",
            supervised=True,
            solvers=(duhl(1000, 1e-4, 50.0),),
            fitted=("coef_", "intercept_", "classes_"),
            macro=MacroForm.MARGIN,
            penalty=Penalty.C,
            standardizes=True,
        ),
        Algorithm(
            "kmeans",
            "KMeans",
            supervised=False,
            solvers=(Solver(SolverName.LLOYD, 300, 1e-4, 30.0),),
            width_parameter="n_clusters",
            default_width=8,
            fitted=("cluster_centers_", "inertia_", "n_iter_", "feature_scale_"),
            macro=MacroForm.NEAREST_CENTROID,
            standardizes=True,
            optional_fitted=("feature_scale_",),  # learned only when trained standardized
        ),
        Algorithm(
            "gnmf",
            "GaussianNMF",
            supervised=False,
            solvers=(Solver(SolverName.MU, 200, 1e-4, 60.0),),
            width_parameter="n_components",
            default_width=2,
            fitted=("components_", "n_components_", "reconstruction_err_", "n_iter_"),
            macro=None,  # its transform iterates: no closed-form macro
        ),
        Algorithm(
            "gradient_boosting",
            "GradientBoosting",
            supervised=True,
            solvers=(Solver(SolverName.HISTOGRAM, 100, 0.0, 100.0),),
            fitted=("trees_", "baseline_", "objective_", "classes_", "feature_importances_", "n_iter_"),
            macro=MacroForm.TREES,
            reads=Rows.BINS,
            iterations_parameter="n_estimators",
            early_stopping_parameter="early_stopping",
        ),
        Algorithm(
            "random_forest",
            "RandomForest",
            supervised=True,
            solvers=(Solver(SolverName.HISTOGRAM, 100, 0.0, 100.0),),
            fitted=("trees_", "baseline_", "objective_", "classes_", "feature_importances_", "n_iter_", "oob_score_"),
            macro=MacroForm.TREES,
            reads=Rows.BINS,
            iterations_parameter="n_estimators",
            optional_fitted=("oob_score_",),  # learned only with oob_score=True
        ),
    )
}
# Solvers the caller may name that no plan picks on its own.
EXTRA_SOLVERS = {
    "linear_regression": (Solver(SolverName.GD, 1000, 1e-6, 300.0),),
    # DuHL's logistic intercept is liblinear's (penalized), another model than the lbfgs one's: named only.
    "logistic_regression": (Solver(SolverName.NEWTON, 100, 1e-4, 8.0, forms_gram=True), duhl(100, 1e-4, 30.0)),
}
NAMES = tuple(CATALOG)
ALL_SOLVERS = tuple(s for a in CATALOG.values() for s in (*a.solvers, *EXTRA_SOLVERS.get(a.name, ())))
GRAM_SOLVERS = frozenset(s.name for s in ALL_SOLVERS if s.forms_gram)
SUPERVISED = tuple(n for n, a in CATALOG.items() if a.supervised)
# The algorithms that read a normalized matrix (linear algebra over it); trees read bins instead.
MATRIX_ALGORITHMS = tuple(n for n, a in CATALOG.items() if a.reads is Rows.MATRIX)
# How a job reads its training data: the normalized matrix (factorized) or DuckDB's join (materialized).


@dataclass(frozen=True)
class TrainSetting:
    """One setting ``train`` takes besides the estimator's parameters: what values it accepts, and its default.

    ``json_types`` is what the options JSON of the SQL functions and the command line may hold;
    ``python_types`` what ``train`` accepts as a keyword (besides a ``None`` default; NumPy's bool counts as
    bool). ``choices`` are its values where they are fixed.
    """

    name: str
    json_types: tuple[type, ...]
    python_types: tuple[type, ...]
    default: Any
    doc: str
    choices: tuple[str, ...] = ()
    expected: str = ""  # what the options JSON must hold, in words, where the types alone do not say it

    def json_accepts(self, value: Any) -> bool:
        """Whether the options JSON may hold ``value`` for this setting (a string of a true-or-false setting
        only as one of its choices)."""
        if not isinstance(value, self.json_types):
            return False
        return not (bool in self.json_types and isinstance(value, str) and value not in self.choices)

    def json_expected(self) -> str:
        """What the options JSON must hold for this setting, in words."""
        if self.expected:
            return self.expected
        if self.json_types == (bool,):
            return "true or false"
        if self.json_types == (bool, str):
            return "true, false or " + " or ".join(json.dumps(c) for c in self.choices)
        if self.json_types == (str,):
            return "one of " + ", ".join(json.dumps(c) for c in self.choices) if self.choices else "a string"
        return 'a size: a number of bytes or a string such as "2GB"'


REUSE_IN_MEMORY = "memory"  # reuse="memory": artifacts kept in this process only, nothing beside a database file

# What train() takes besides the estimator's parameters, in its signature's order.
TRAIN_SETTINGS: tuple[TrainSetting, ...] = (
    TrainSetting(
        "strategy",
        (str,),
        (str,),
        AUTO,
        "train on the normalized matrix or on the DuckDB join, or let the cost model choose",
        choices=STRATEGY_CHOICES,
    ),
    TrainSetting(
        "backend",
        (str,),
        (str,),
        AUTO,
        "the array library: NumPy, CuPy on a GPU, or CuPy where one is usable",
        choices=BACKENDS,
    ),
    TrainSetting("standardize", (bool,), (bool,), False, "train linear models and k-means on standardized columns"),
    TrainSetting("impute", (bool,), (bool,), True, "replace numeric NULLs by the training mean"),
    TrainSetting(
        "reuse",
        (bool, str),
        (bool, str),
        True,
        'use and keep the artifacts of earlier jobs ("memory": in this process only, nothing beside the database)',
        choices=(REUSE_IN_MEMORY,),
    ),
    TrainSetting(
        "memory_budget",
        (str, int),
        (str, int),
        None,
        "bytes the training data may take in memory; above it the fact is streamed (None: half the memory free)",
    ),
    # A Dask client or scheduler address in Python; in JSON a name the Python host registered.
    TrainSetting(
        "cluster",
        (str,),
        (str, object),
        None,
        "train on a Dask cluster",
        expected="a cluster's name, as the Python host registered it (a Dask client or address in Python)",
    ),
    TrainSetting("group_by", (str,), (str,), None, "train one model per value of this SELECT column, from one read"),
    TrainSetting(
        "validation",
        (float, int, str),
        (float, int, str),
        None,
        "hold out this share of the rows read (or score this SELECT) and report the model's metrics on them",
        expected="a share of the rows between 0 and 1, or a SELECT of the rows to score",
    ),
)
SETTINGS: dict[str, TrainSetting] = {s.name: s for s in TRAIN_SETTINGS}
MAX_GRAM_BYTES = 256 << 20  # default bound on a dense d x d matrix any solver forms (256 MiB: d up to about 5,800)


def l2_penalty(algorithm: str, params: dict[str, Any], n_rows: int) -> float:
    """The L2 penalty lambda of ``algorithm`` with ``params`` in DuHL's objective (0: none, and no dual solver
    applies); :class:`Penalty` says how each algorithm's parameters give it."""
    how = algorithm_facts(algorithm).penalty
    return how.strength(params, n_rows) if how is not None else 0.0


def solver_applies(algorithm: str, solver: Solver, params: dict[str, Any]) -> bool:
    """Whether a plan may pick ``solver`` for ``algorithm`` with ``params``: a dual solver needs a positive
    L2 penalty (ridge with alpha = 0 has none)."""
    return not (solver.needs_penalty and not l2_penalty(algorithm, params, 1) > 0)


def check_algorithm(algorithm: Any) -> str:
    """``algorithm`` if ilargi_db knows it, else an error naming the choices."""
    if not isinstance(algorithm, str) or algorithm not in CATALOG:
        raise IlargiError(f"unknown algorithm {algorithm!r}: choose one of {', '.join(NAMES)}.")
    return algorithm


def algorithm_facts(algorithm: str) -> Algorithm:
    """The catalog entry of ``algorithm`` (checked)."""
    return CATALOG[check_algorithm(algorithm)]


def estimator_class(algorithm: str) -> type:
    """The scikit-learn-style estimator class of ``algorithm``."""
    return algorithm_facts(algorithm).estimator_class()


def check_known_settings(algorithm: str, names: Any, extra: tuple[str, ...] = tuple(SETTINGS)) -> None:
    """Refuse setting names ``algorithm``'s estimator and ``train`` do not know, listing those they do.

    Worded for the caller: keyword parameters in Python, options in SQL and on the command line.
    """
    params = list(inspect.signature(estimator_class(algorithm)).parameters)
    unknown = sorted(set(names) - set(params) - set(extra))
    if not unknown:
        return
    settings = list(SETTINGS)
    raise IlargiError(
        worded(
            f"unknown parameter(s) {', '.join(unknown)} for {algorithm}: its parameters are {', '.join(params)}, "
            f"and train() also takes {', '.join(settings[:-1])} and {settings[-1]}.",
            f"unknown option(s) {', '.join(map(repr, unknown))} for {algorithm}: the options are "
            f"{', '.join(params + list(extra))}.",
        )
    )


def make_estimator(algorithm: str, params: dict) -> Any:
    """The estimator with ``params``, checked before any data is read (unknown names, JSON-ish types, values)."""
    from ilargi_db.models.parameter_kinds import check_python_types

    cls = estimator_class(algorithm)
    check_known_settings(algorithm, params, extra=())
    check_python_types(algorithm, cls, params)  # scikit-learn would read True as 1
    estimator = cls(**params)
    estimator._validate_params()  # bad values fail here, with scikit-learn's message
    return estimator
