"""``cross_validate``: folds x parameters over a join from one read, the folds' sums of the data shared.

The query is read once into a normalized matrix; each fold's training and held-out rows are row selections
of it (``X[rows]``: the dimension blocks shared, never copied), built once and fitted with every parameter
set, so a parameter set after the first reuses the fold's memoized X^T X and column sums. When the
held-out rows of the folds partition the rows (k-fold), a fold's X^T X is the sum of the other folds'
held-out rows' ones: the data is summed once in all, not once per fold.

``cv=k`` deals the rows into folds by their keys (:class:`KeyedFolds`, :mod:`ilargi_db.linalg.row_identity`): each
row's fold is a seeded hash of its values, never its position, so the folds are the same rows on every run,
whatever order DuckDB's threads, a view over Parquet or ties in ORDER BY deliver them in. Settings that cannot
score (more folds than rows or than a class's rows, a scorer the estimator cannot feed) are refused in the
caller's terms before the folds are fitted; the scorer before anything is read.
"""

from __future__ import annotations

import inspect
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from numbers import Integral
from typing import Any

import duckdb
import numpy as np

from ilargi_db.backend import to_host
from ilargi_db.errors import CALLER, IlargiError, spell, worded
from ilargi_db.interruption import check_interrupted, interruptible_job
from ilargi_db.limits import GRID_SETS
from ilargi_db.linalg import COLSUMS, CROSSPROD
from ilargi_db.linalg.row_identity import folds_by_key, row_keys
from ilargi_db.models.catalog import SUPERVISED, Rows, SolverName, algorithm_facts, estimator_class, make_estimator
from ilargi_db.normalization import binned_rows, normalize

DEFAULT_FOLDS = 5
MIN_FOLDS = 2  # a fold holds rows out: one fold would hold out every row
# The algorithms cross_validate scores: every supervised one, fitted on rows of one read selected per fold (the
# normalized matrix, or the binned rows of the trees).
CROSS_VALIDATED = SUPERVISED


def check_cross_validated(algorithm: str, target: str | None) -> None:
    """Refuse, before anything is read, an algorithm cross_validate does not score, or no target."""
    if algorithm not in CROSS_VALIDATED:
        scores = worded("cross_validate scores", "cross-validation scores")
        raise IlargiError(f"{scores} supervised models, one of {', '.join(CROSS_VALIDATED)}; got {algorithm!r}.")
    if target is None:
        raise IlargiError(f"{algorithm} needs a target to score: pass {spell('target', '<label column>')}.")


def _candidates(algorithm: str, params: Mapping[str, Any], param_grid: Any) -> list[dict[str, Any]]:
    """Every parameter set of the grid (a dict of lists, or a list of them), each checked before any read."""
    from sklearn.model_selection import ParameterGrid

    grid = ParameterGrid(param_grid or {})
    # Counted (the product of each grid's lists) before any set is built: a few kilobytes of JSON can name 10^7.
    GRID_SETS.check(
        len(grid),
        ("--grid" if CALLER.get() == "cli" else "param_grid") + " names {count} parameter sets",
        "Search fewer values of each parameter (or search them in stages)",
    )
    candidates = [dict(c) for c in grid]
    searched = {name for c in candidates for name in c}
    both = sorted(searched & set(params))
    if both:
        given = worded("both as a parameter and in param_grid", "both as an option and in param_grid")
        raise IlargiError(f"{', '.join(both)} given {given}: give each in one place.")
    for candidate in candidates:
        make_estimator(algorithm, {**params, **candidate})  # unknown names, wrong types and bad values fail here
    return candidates


class KeyedFolds:
    """``n_splits`` folds of the rows dealt by their keys (a seeded hash of each row's values and label), stratified
    by class when ``stratify``: the same rows in each fold whatever order they come in. A scikit-learn splitter
    (``split``, ``get_n_splits``), so a search on the materialized join can take the same folds.

    ``random_state`` seeds the keys (None: a new seed on each ``split``, as an unseeded shuffle)."""

    def __init__(self, n_splits: int = DEFAULT_FOLDS, *, stratify: bool = False, random_state: int | None = 0):
        self.n_splits, self.stratify, self.random_state = n_splits, stratify, random_state

    def get_n_splits(self, X: Any = None, y: Any = None, groups: Any = None) -> int:
        return self.n_splits

    def split(self, X: Any, y: Any = None, groups: Any = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        seed = self.random_state
        if seed is None:
            seed = int(np.random.default_rng().integers(2**32))
        labels = None if y is None else to_host(y) if hasattr(y, "get") else np.asarray(y)
        fold = folds_by_key(row_keys(X, (labels,), int(seed)), self.n_splits, labels if self.stratify else None)
        for k in range(self.n_splits):
            yield np.flatnonzero(fold != k), np.flatnonzero(fold == k)


def _splitter(cv: Any, stratify: bool, random_state: int | None) -> Any:
    """``cv`` folds by the rows' keys (a query's rows come in no order that repeats), stratified for a classifier;
    or ``cv``'s own splitter (anything with ``split``, as scikit-learn takes), used as given."""
    if hasattr(cv, "split"):
        return cv
    if isinstance(cv, bool) or not isinstance(cv, Integral) or cv < MIN_FOLDS:
        raise IlargiError(
            f"cv={cv!r}: give the number of folds ({MIN_FOLDS} or more) or a scikit-learn splitter such as KFold."
        )
    if random_state is not None and (isinstance(random_state, bool) or not isinstance(random_state, Integral)):
        raise IlargiError(f"random_state={random_state!r}: give an integer seed of the folds, or None.")
    return KeyedFolds(int(cv), stratify=stratify, random_state=random_state)


def _label(value: Any) -> Any:
    """A class label as the caller wrote it: a Python value, and a whole number read as a double an integer."""
    value = value.item() if hasattr(value, "item") else value
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _classifies(algorithm: str, estimator: Any = None, y: Any = None) -> bool | None:
    """Whether ``algorithm`` (as ``estimator`` is set, or at its defaults) classifies ``y``'s rows; None where only
    the rows can say (a tree model's ``objective="auto"`` before they are read)."""
    model = estimator_class(algorithm)() if estimator is None else estimator
    model = getattr(model, "named_steps", {}).get("model", model)  # a standardized model's Pipeline: the model
    return model.classifies(y)


def check_fold_counts(cv: Any, algorithm: str, y: np.ndarray, classifies: bool | None = None) -> None:
    """Refuse ``cv`` folds of ``y``'s rows that cannot all be scored: more folds than rows, one class only, or a
    class of fewer rows than folds (a fold would hold none of it out, or train without it). ``classifies``: whether
    the model classifies (None: as ``algorithm`` does)."""
    if not isinstance(cv, Integral):
        return  # a splitter of the caller's: its folds as it makes them
    given = spell("cv", int(cv))
    if len(y) < cv:
        raise IlargiError(
            f"{given}: {cv} folds need at least {cv} rows, and the training query returned {len(y)}: pass "
            f"{spell('cv', max(MIN_FOLDS, len(y)))} or fewer folds (at least {MIN_FOLDS}), or a query with more rows."
        )
    if not (_classifies(algorithm) if classifies is None else classifies):
        return
    labels, counts = np.unique(y, return_counts=True)
    if len(labels) < 2:
        raise IlargiError(
            f"{algorithm} needs two classes or more to fit, and every row of the target is {_label(labels[0])!r}: "
            "check the query's target and WHERE clause."
        )
    fewest = int(counts.min())
    if fewest < cv:
        few = _label(labels[int(np.argmin(counts))])
        fix = (
            f"pass {spell('cv', fewest)} or fewer folds"
            if fewest >= MIN_FOLDS
            else "filter the class out of the query, or give it more rows"
        )
        raise IlargiError(
            f"{given}: the class {few!r} has {fewest} "
            f"row{'s' if fewest > 1 else ''}, fewer than the {cv} folds, so a fold would be scored or trained "
            f"without it: {fix}."
        )


def check_scorer(scorer: Any, scoring: Any, algorithm: str, estimator: Any, y: Any = None) -> None:
    """Refuse a scorer that cannot score ``algorithm``'s predictions (a classifier's scorer for a regression, one
    that needs probabilities of a model that has none...), by scoring a fit on a few made-up rows: labelled like
    ``y`` when given (its classes), two classes or numbers else. Before any read (where the rows need not say
    whether it classifies), and before any fold's fit."""
    classifies = _classifies(algorithm, estimator, y)
    if classifies is None:
        return  # objective="auto": checked again once the rows are read
    n = 12
    if y is None:
        labels = np.arange(n) % 2 if classifies else np.linspace(0.0, 1.0, n)
    elif classifies:
        classes = np.unique(y)
        n = max(n, 4 * len(classes))
        labels = classes[np.arange(n) % len(classes)]
    else:
        labels = np.linspace(float(np.min(y)), float(np.max(y)), n)
    X = np.random.default_rng(0).normal(size=(n, 2)) + (np.arange(n) % 2)[:, None]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a made-up fit converging or not is no news
            scorer(estimator.fit(X, labels), X, labels)
    except Exception as err:  # noqa: BLE001 - whatever the scorer raises is named in the caller's terms
        said = str(err).strip().splitlines()[0].rstrip(".") if str(err).strip() else type(err).__name__
        name = scoring if isinstance(scoring, str) else getattr(scoring, "__name__", repr(scoring))
        what = spell("scoring", name)
        kind = "a classifier" if classifies else "a regression"
        raise IlargiError(
            f"{what} cannot score {algorithm} ({kind}): {said}. Pass a scorer for {kind} "
            f"({'accuracy, roc_auc, f1' if classifies else 'r2, neg_mean_squared_error, neg_mean_absolute_error'}),"
            " or none for the estimator's own score."
        ) from None


def _reads_the_gram(estimator: Any, n_features: int) -> bool:
    """Whether the fit sums X^T X of its rows (the normal equations): then the folds' sums are worth sharing."""
    choose = getattr(estimator, "choose_solver", None)
    return choose is not None and choose(n_features)[0] == SolverName.NORMAL


def _share_fold_sums(
    n_rows: int, folds: Sequence[tuple[np.ndarray, np.ndarray]], train_rows: list, test_rows: list
) -> None:
    """Give each fold's training rows X^T X and the column sums as the sums of the other folds' held-out rows,
    when the held-out rows partition the rows and each fold trains on all the others (k-fold): every row
    summed once in all, sums of sums (no subtraction to cancel digits). Otherwise each fold sums its own
    (once, for every parameter set)."""
    held_out = np.concatenate([test for _, test in folds])
    if len(held_out) != n_rows or not np.array_equal(np.sort(held_out), np.arange(n_rows)):
        return
    if any(len(np.union1d(train, test)) != n_rows or len(train) + len(test) != n_rows for train, test in folds):
        return  # a fold trains on fewer rows than the others' held-out ones (or repeats some)
    grams, colsums = [p.crossprod() for p in test_rows], [p.colsums() for p in test_rows]
    for k, train in enumerate(train_rows):
        others = [j for j in range(len(folds)) if j != k]
        train.restore_memoized_sums(
            {CROSSPROD: sum(grams[j] for j in others), COLSUMS: sum(colsums[j] for j in others)}
        )


def _read(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str,
    algorithm: str,
    candidates: list[dict[str, Any]],
    params: Mapping[str, Any],
    backend: str,
    impute: bool,
) -> tuple[Any, Any]:
    """The rows every fold selects from, read once: the normalized matrix, or a tree model's binned rows (its
    rows whose target is not NULL, each feature binned at DuckDB's quantiles over all of them, as ``train`` bins
    them; one ``max_bins`` for the whole grid)."""
    if algorithm_facts(algorithm).reads is Rows.MATRIX:
        return normalize(con, query, target=target, backend=backend, impute=impute)
    max_bins = {make_estimator(algorithm, {**params, **c}).max_bins for c in candidates}
    if len(max_bins) > 1:
        raise IlargiError(
            f"the parameter sets bin the rows {len(max_bins)} ways (max_bins {sorted(max_bins)}), and "
            "cross_validate bins them once: search one max_bins at a time."
        )
    return binned_rows(con, query, target, max_bins.pop())


def check_standardizes(algorithm: str, standardize: bool) -> None:
    """Refuse ``standardize`` for an algorithm ``train`` does not standardize (trees split on values as they are)."""
    if standardize and not algorithm_facts(algorithm).standardizes:
        raise IlargiError(
            f"{spell('standardize', True)} is for linear and logistic regression, the linear SVM and k-means; "
            f"{algorithm} fits the columns as they are: leave it out."
        )


def _rank(means: np.ndarray) -> list[int]:
    """1 for the best mean score, ties sharing the smaller rank (as scikit-learn's ``rank_test_score``)."""
    order = np.where(np.isnan(means), -np.inf, means)
    return [int(1 + np.sum(order > m)) for m in order]


@interruptible_job
def cross_validate(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str,
    algorithm: str,
    cv: Any = DEFAULT_FOLDS,
    param_grid: Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Sequence[Any]]] | None = None,
    *,
    scoring: Any = None,
    random_state: int | None = 0,
    backend: str = "auto",
    impute: bool = True,
    standardize: bool = False,
    **params: Any,
) -> list[dict[str, Any]]:
    """Score ``algorithm`` on ``cv`` folds of a join for every parameter set of ``param_grid``, reading once.

    Parameters
    ----------
    con, query, target
        The connection, the training query (a SELECT over joined tables) and its label column, as for
        :func:`ilargi_db.train`.
    algorithm : str
        A supervised algorithm: ``"linear_regression"``, ``"logistic_regression"``, ``"linear_svc"`` (fitted on the
        normalized matrix), ``"gradient_boosting"`` or ``"random_forest"`` (on the rows binned once, every feature
        at DuckDB's quantiles of all the rows read, as ``train`` bins them; one ``max_bins`` for the grid).
    cv : int or splitter, default=5
        The number of folds, each row's fold set by a hash of its values seeded with ``random_state``
        (:class:`KeyedFolds`: the same folds on every run, whatever order the rows come in; stratified by class
        for a classifier), or a scikit-learn splitter (``KFold(...)``, ``ShuffleSplit(...)``...) used as given.
        ``random_state`` also seeds every fit of a model that draws (a random forest's bootstraps, boosting's
        early-stopping rows) unless the grid sets the model's own ``random_state``.
    param_grid : dict of lists, or a list of such dicts
        The parameter sets to compare, as scikit-learn's ``GridSearchCV`` takes them; none: ``params`` alone.
        At most 10,000 sets (counted before any is built; ``ILARGI_MAX_GRID_SETS`` raises it).
    scoring : str or callable, optional
        A scikit-learn scorer name (``"r2"``, ``"roc_auc"``, ``"neg_mean_squared_error"``...) or callable;
        by default the estimator's ``score`` (R2 for a regression, accuracy for a classifier).
    backend, impute, standardize
        As for :func:`ilargi_db.train`, with its defaults: ``impute`` the numeric NULLs at the training mean
        (and the rows of a NULL target left out), ``standardize`` each fold's columns at that fold's training
        rows' mean and deviation (a ``Pipeline`` of :class:`~ilargi_db.models.StandardScaler` and the model, the
        join kept factorized) for the algorithms ``train`` standardizes. So a fold scores what a training on
        its rows would.
    **params
        The estimator's parameters every set shares (``fit_intercept=False``, ``max_iter=500``...).

    Returns
    -------
    list of dict
        One row per parameter set, in the grid's order: ``params``, ``mean_score``, ``std_score``, ``rank``
        (1 the best), ``fold_scores`` and ``fit_seconds`` (all folds). ``pyarrow.Table.from_pylist`` makes
        it a table DuckDB can query.

    Examples
    --------
    >>> import ilargi_db
    >>> con = ilargi_db.connect()
    >>> _ = con.execute("CREATE TABLE d AS SELECT range AS id, range % 7 AS v FROM range(10)")
    >>> _ = con.execute("CREATE TABLE f AS SELECT range % 10 AS d_id, range % 3 AS x, "
    ...                 "(range % 10) % 7 * 2.0 + range % 3 AS y FROM range(60)")
    >>> rows = ilargi_db.cross_validate(con, "SELECT f.x, d.v, f.y FROM f JOIN d ON f.d_id = d.id", "y",
    ...                                 "linear_regression", cv=3, param_grid={"alpha": [0.0, 100.0]})
    >>> [(r["params"], r["rank"]) for r in rows]
    [({'alpha': 0.0}, 1), ({'alpha': 100.0}, 2)]
    """
    check_cross_validated(algorithm, target)
    in_grid = {
        name for grid in (param_grid if isinstance(param_grid, Sequence) else [param_grid or {}]) for name in grid
    }
    drawing = "random_state" in inspect.signature(estimator_class(algorithm)).parameters
    if drawing and random_state is not None and "random_state" not in in_grid:
        # a model that draws is seeded with the folds' seed: the same scores on every run
        params = {"random_state": random_state, **params}
    candidates = _candidates(algorithm, params, param_grid)
    from sklearn.metrics import check_scoring

    check_standardizes(algorithm, standardize)

    def model(candidate: Mapping[str, Any]) -> Any:
        """The estimator of a parameter set, behind a fold's own scaler where the columns are standardized."""
        estimator = make_estimator(algorithm, {**params, **candidate})
        if not standardize:
            return estimator
        from sklearn.pipeline import Pipeline

        from ilargi_db.models import StandardScaler

        center = getattr(estimator, "fit_intercept", True)  # as train centers: not a model without intercept
        return Pipeline([("standardize", StandardScaler(with_mean=center)), ("model", estimator)])

    first = model(candidates[0])
    scorer = check_scoring(first, scoring=scoring)
    _splitter(cv, False, random_state)  # cv and random_state checked before the read
    check_scorer(scorer, scoring, algorithm, first)
    X, y = _read(con, query, target, algorithm, candidates, params, backend, impute)
    y = to_host(y) if hasattr(y, "get") else np.asarray(y)
    classifies = bool(_classifies(algorithm, first, y))
    splitter = _splitter(cv, classifies, random_state)
    check_fold_counts(cv, algorithm, y, classifies)
    if classifies:
        check_scorer(scorer, scoring, algorithm, first, y)  # again with the classes read
    # Keyed folds hash the rows' values; a splitter of the caller's sees only how many rows (it may not take X).
    rows = X if isinstance(splitter, KeyedFolds) else np.zeros((len(y), 1))
    folds = [(np.asarray(train), np.asarray(test)) for train, test in splitter.split(rows, y)]
    train_rows, test_rows = [X[train] for train, _ in folds], [X[test] for _, test in folds]
    if any(_reads_the_gram(make_estimator(algorithm, {**params, **c}), X.shape[1]) for c in candidates):
        _share_fold_sums(X.shape[0], folds, train_rows, test_rows)
    found = []
    for candidate in candidates:
        scores, seconds = [], 0.0
        for (train, test), X_train, X_test in zip(folds, train_rows, test_rows):
            check_interrupted()  # interrupt_training() and Ctrl-C stop the search between fits too
            began = time.perf_counter()
            fitted = model(candidate).fit(X_train, y[train])
            seconds += time.perf_counter() - began
            scores.append(float(scorer(fitted, X_test, y[test])))
        found.append((candidate, scores, seconds))
    ranks = _rank(np.array([np.mean(scores) for _, scores, _ in found]))
    return [
        {
            "params": {name: value.item() if isinstance(value, np.generic) else value for name, value in c.items()},
            "rank": rank,
            "mean_score": float(np.mean(scores)),
            "std_score": float(np.std(scores)),
            "fold_scores": scores,
            "fit_seconds": seconds,
        }
        for (c, scores, seconds), rank in zip(found, ranks)
    ]


__all__ = [
    "CROSS_VALIDATED",
    "MIN_FOLDS",
    "KeyedFolds",
    "check_cross_validated",
    "check_fold_counts",
    "check_scorer",
    "cross_validate",
]
