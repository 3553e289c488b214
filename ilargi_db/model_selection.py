"""``cross_validate``: folds x parameters over a join from one read, the folds' sums of the data shared.

The query is read once into a normalized matrix; each fold's training and held-out rows are row selections
of it (``X[rows]``: the dimension blocks shared, never copied), built once and fitted with every parameter
set, so a parameter set after the first reuses the fold's memoized X^T X and column sums. When the
held-out rows of the folds partition the rows (k-fold), a fold's X^T X is the sum of the other folds'
held-out rows' ones: the data is summed once in all, not once per fold.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import duckdb
import numpy as np

from ilargi_db.backend import to_host
from ilargi_db.errors import IlargiError, spell, worded
from ilargi_db.linalg import COLSUMS, CROSSPROD
from ilargi_db.models.catalog import SUPERVISED, SolverName, algorithm_facts, make_estimator
from ilargi_db.normalization import normalize

CLASSIFYING_METRICS = ("classification", "margin")  # catalog metrics whose folds keep the classes' shares
DEFAULT_FOLDS = 5
MIN_FOLDS = 2  # a fold holds rows out: one fold would hold out every row
# The algorithms cross_validate scores: supervised, fitted on the normalized matrix (rows of it selected per fold).
CROSS_VALIDATED = tuple(name for name in SUPERVISED if algorithm_facts(name).reads == "matrix")


def check_cross_validated(algorithm: str, target: str | None) -> None:
    """Refuse, before anything is read, an algorithm cross_validate does not score, or no target."""
    if algorithm not in CROSS_VALIDATED:
        scores = worded("cross_validate scores", "cross-validation scores")
        raise IlargiError(
            f"{scores} supervised models fitted on a normalized matrix, one of {', '.join(CROSS_VALIDATED)}; "
            f"got {algorithm!r}."
        )
    if target is None:
        raise IlargiError(f"{algorithm} needs a target to score: pass {spell('target', '<label column>')}.")


def _candidates(algorithm: str, params: Mapping[str, Any], param_grid: Any) -> list[dict[str, Any]]:
    """Every parameter set of the grid (a dict of lists, or a list of them), each checked before any read."""
    from sklearn.model_selection import ParameterGrid

    candidates = [dict(c) for c in ParameterGrid(param_grid or {})]
    searched = {name for c in candidates for name in c}
    both = sorted(searched & set(params))
    if both:
        given = worded("both as a parameter and in param_grid", "both as an option and in param_grid")
        raise IlargiError(f"{', '.join(both)} given {given}: give each in one place.")
    for candidate in candidates:
        make_estimator(algorithm, {**params, **candidate})  # unknown names, wrong types and bad values fail here
    return candidates


def _splitter(cv: Any, algorithm: str, random_state: int | None) -> Any:
    """``cv`` folds, shuffled (a query's rows often come sorted), stratified for a classifier; or ``cv``'s own
    splitter (anything with ``split``, as scikit-learn takes)."""
    from sklearn.model_selection import KFold, StratifiedKFold

    if hasattr(cv, "split"):
        return cv
    if isinstance(cv, bool) or not isinstance(cv, int) or cv < MIN_FOLDS:
        raise IlargiError(
            f"cv={cv!r}: give the number of folds ({MIN_FOLDS} or more) or a scikit-learn splitter such as KFold."
        )
    stratified = algorithm_facts(algorithm).metrics in CLASSIFYING_METRICS
    return (StratifiedKFold if stratified else KFold)(cv, shuffle=True, random_state=random_state)


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


def _rank(means: np.ndarray) -> list[int]:
    """1 for the best mean score, ties sharing the smaller rank (as scikit-learn's ``rank_test_score``)."""
    order = np.where(np.isnan(means), -np.inf, means)
    return [int(1 + np.sum(order > m)) for m in order]


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
    impute: bool = False,
    **params: Any,
) -> list[dict[str, Any]]:
    """Score ``algorithm`` on ``cv`` folds of a join for every parameter set of ``param_grid``, reading once.

    Parameters
    ----------
    con, query, target
        The connection, the training query (a SELECT over joined tables) and its label column, as for
        :func:`ilargi_db.train`.
    algorithm : str
        A supervised algorithm that fits a normalized matrix: ``"linear_regression"``,
        ``"logistic_regression"`` or ``"linear_svc"``.
    cv : int or splitter, default=5
        The number of folds (shuffled with ``random_state``; stratified by class for a classifier), or a
        scikit-learn splitter (``KFold(...)``, ``ShuffleSplit(...)``...) used as given.
    param_grid : dict of lists, or a list of such dicts
        The parameter sets to compare, as scikit-learn's ``GridSearchCV`` takes them; none: ``params`` alone.
    scoring : str or callable, optional
        A scikit-learn scorer name (``"r2"``, ``"roc_auc"``, ``"neg_mean_squared_error"``...) or callable;
        by default the estimator's ``score`` (R2 for a regression, accuracy for a classifier).
    backend, impute
        As for :func:`ilargi_db.normalize`.
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
    candidates = _candidates(algorithm, params, param_grid)
    from sklearn.metrics import check_scoring

    scorer = check_scoring(make_estimator(algorithm, {**params, **candidates[0]}), scoring=scoring)
    splitter = _splitter(cv, algorithm, random_state)
    X, y = normalize(con, query, target=target, backend=backend, impute=impute)
    y = to_host(y) if hasattr(y, "get") else np.asarray(y)
    folds = [(np.asarray(train), np.asarray(test)) for train, test in splitter.split(np.zeros((len(y), 1)), y)]
    train_rows, test_rows = [X[train] for train, _ in folds], [X[test] for _, test in folds]
    if any(_reads_the_gram(make_estimator(algorithm, {**params, **c}), X.shape[1]) for c in candidates):
        _share_fold_sums(X.shape[0], folds, train_rows, test_rows)
    found = []
    for candidate in candidates:
        scores, seconds = [], 0.0
        for (train, test), X_train, X_test in zip(folds, train_rows, test_rows):
            began = time.perf_counter()
            fitted = make_estimator(algorithm, {**params, **candidate}).fit(X_train, y[train])
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


__all__ = ["CROSS_VALIDATED", "MIN_FOLDS", "check_cross_validated", "cross_validate"]
