"""Model selection over a join: scikit-learn's splitters, searches and pipelines run on a normalized matrix with
ilargi_db's estimators (``X[rows]`` kept factorized), and ``ilargi_db.cross_validate`` reads once; every score
equals the same search on the materialized join."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from sklearn.model_selection import (
    GridSearchCV,
    KFold,
    ShuffleSplit,
    StratifiedKFold,
    cross_val_score,
    train_test_split,
)
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler as DenseScaler

import ilargi_db
from ilargi_db.errors import IlargiError, TrainingInterrupted
from ilargi_db.linalg import NormalizedMatrix, ScaledMatrix
from ilargi_db.model_selection import KeyedFolds
from ilargi_db.models import LinearRegression, LogisticRegression, StandardScaler

QUERY = """
    SELECT s.amount, s.discount, c.age, c.segment, r.income, s.y
    FROM sales s JOIN customers c ON s.customer = c.id LEFT JOIN regions r ON c.region = r.id
"""
ALPHAS = [0.01, 1.0, 30.0, 1000.0]


@pytest.fixture(scope="module")
def database():
    """A snowflake (sales -> customers -> regions) with a text feature (one-hot) and customers of no region."""
    rng = np.random.default_rng(7)
    n, customers, regions = 400, 37, 5
    region = rng.integers(0, regions + 1, customers)  # region `regions` does not exist: LEFT JOIN leaves it empty
    age = rng.integers(18, 70, customers).astype(float)
    segment = np.array(["retail", "corporate", "home"])[rng.integers(0, 3, customers)]
    customer = rng.integers(0, customers, n)
    amount, discount = rng.normal(100, 20, n).round(2), rng.random(n).round(3)
    y = 0.3 * amount - 10 * discount + 0.2 * age[customer] + 5 * (segment[customer] == "home") + rng.normal(0, 4, n)
    con = duckdb.connect()
    for name, table in {
        "regions": pa.table({"id": np.arange(regions), "income": np.arange(regions) * 1.5 + 2}),
        "customers": pa.table({"id": np.arange(customers), "age": age, "segment": segment, "region": region}),
        "sales": pa.table({"customer": customer, "amount": amount, "discount": discount, "y": y}),
    }.items():
        con.register(f"{name}_arrow", table)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
        con.unregister(f"{name}_arrow")
    return con


@pytest.fixture(scope="module")
def join(database):
    """The query's normalized matrix as train reads it (numeric NULLs imputed, as cross_validate's default too), its
    target, and the join materialized (the oracle)."""
    X, y = ilargi_db.normalize(database, QUERY, target="y", backend="numpy", impute=True)
    return X, np.asarray(y), X.materialize()


def test_a_split_of_a_normalized_matrix_is_a_normalized_matrix_of_those_rows(join):
    X, y, T = join
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
    T_train, T_test, _, _ = train_test_split(T, y, test_size=0.25, random_state=0)
    assert isinstance(X_train, NormalizedMatrix) and isinstance(X_test, NormalizedMatrix)
    np.testing.assert_array_equal(X_train.materialize(), T_train)
    np.testing.assert_array_equal(X_test.materialize(), T_test)
    for train, test in KFold(5, shuffle=True, random_state=1).split(X):
        np.testing.assert_array_equal(X[train].materialize(), T[train])
        np.testing.assert_array_equal(X[test].materialize(), T[test])


def test_cross_val_score_of_ridge_equals_it_on_the_materialized_join(join):
    X, y, T = join
    cv = KFold(5, shuffle=True, random_state=0)
    factorized = cross_val_score(LinearRegression(alpha=1.0), X, y, cv=cv)
    dense = cross_val_score(LinearRegression(alpha=1.0), T, y, cv=cv)
    np.testing.assert_allclose(factorized, dense, rtol=0, atol=1e-8)
    assert factorized.mean() > 0.5  # a model worth selecting: the scores are not noise


def test_grid_search_over_alpha_picks_what_it_picks_on_the_materialized_join(join):
    X, y, T = join
    cv = KFold(5, shuffle=True, random_state=0)
    grid = {"alpha": ALPHAS}
    factorized = GridSearchCV(LinearRegression(), grid, cv=cv).fit(X, y)
    dense = GridSearchCV(LinearRegression(), grid, cv=cv).fit(T, y)
    assert factorized.best_params_ == dense.best_params_
    for key in ("mean_test_score", *(f"split{k}_test_score" for k in range(5))):
        np.testing.assert_allclose(factorized.cv_results_[key], dense.cv_results_[key], rtol=0, atol=1e-8)
    np.testing.assert_allclose(factorized.best_estimator_.coef_, dense.best_estimator_.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(factorized.predict(X[:10]), dense.predict(T[:10]), rtol=1e-10)


def test_grid_search_of_logistic_regression_by_roc_auc_equals_it_on_the_materialized_join(join):
    X, y, T = join
    label = (y > np.median(y)).astype(int)
    cv = StratifiedKFold(4, shuffle=True, random_state=0)
    grid = {"C": [0.01, 1.0, 100.0]}
    model = LogisticRegression(solver="newton", max_iter=50)
    factorized = GridSearchCV(model, grid, cv=cv, scoring="roc_auc").fit(X, label)
    dense = GridSearchCV(model, grid, cv=cv, scoring="roc_auc").fit(T, label)
    assert factorized.best_params_ == dense.best_params_
    np.testing.assert_allclose(
        factorized.cv_results_["mean_test_score"], dense.cv_results_["mean_test_score"], rtol=0, atol=1e-8
    )


def test_a_pipeline_ending_in_an_ilargi_estimator_is_searched_without_densifying(join):
    X, y, T = join
    seen = []

    class Recorder(LinearRegression):
        """The pipeline's last step, noting what the search hands it."""

        def fit(self, X, y, **kwargs):
            seen.append(type(X))
            return super().fit(X, y, **kwargs)

    pipe = Pipeline([("model", Recorder())])
    cv = KFold(3, shuffle=True, random_state=2)
    factorized = GridSearchCV(pipe, {"model__alpha": ALPHAS}, cv=cv).fit(X, y)
    dense = GridSearchCV(Pipeline([("model", LinearRegression())]), {"model__alpha": ALPHAS}, cv=cv).fit(T, y)
    assert factorized.best_params_ == dense.best_params_
    np.testing.assert_allclose(
        factorized.cv_results_["mean_test_score"], dense.cv_results_["mean_test_score"], rtol=0, atol=1e-8
    )
    assert set(seen) == {NormalizedMatrix}  # every fold and the refit got the factorized rows


def test_a_pipeline_that_standardizes_hands_the_estimator_a_standardized_view_not_a_dense_matrix(join):
    X, y, T = join
    label = (y > np.median(y)).astype(int)
    seen = []

    class Recorder(LogisticRegression):
        def fit(self, X, y, **kwargs):
            seen.append(type(X))
            return super().fit(X, y, **kwargs)

    cv = StratifiedKFold(4, shuffle=True, random_state=3)
    grid = {"model__C": [0.001, 0.1, 10.0]}
    factorized = GridSearchCV(Pipeline([("scale", StandardScaler()), ("model", Recorder())]), grid, cv=cv)
    dense = GridSearchCV(Pipeline([("scale", DenseScaler()), ("model", LogisticRegression())]), grid, cv=cv)
    factorized.fit(X, label)
    dense.fit(T, label)
    assert set(seen) == {ScaledMatrix}
    assert factorized.best_params_ == dense.best_params_
    np.testing.assert_allclose(
        factorized.cv_results_["mean_test_score"], dense.cv_results_["mean_test_score"], rtol=0, atol=1e-8
    )
    np.testing.assert_allclose(factorized.predict_proba(X), dense.predict_proba(T), atol=1e-6)


def test_the_scaler_learns_scikit_learns_mean_and_scale_on_the_join(join):
    X, _, T = join
    ours, theirs = StandardScaler().fit(X), DenseScaler().fit(T)
    np.testing.assert_allclose(ours.mean_, theirs.mean_, rtol=1e-12)
    np.testing.assert_allclose(ours.scale_, theirs.scale_, rtol=1e-9)
    np.testing.assert_allclose(ours.transform(X).materialize(), theirs.transform(T), atol=1e-9)
    np.testing.assert_allclose(StandardScaler(with_mean=False).fit(X).mean_, 0.0)
    with pytest.raises(IlargiError, match="standardized already"):
        StandardScaler().fit(ours.transform(X))


def test_cross_validate_reads_once_and_scores_as_grid_search_on_the_materialized_join(database, join):
    _, y, T = join
    cv = KFold(5, shuffle=True, random_state=4)
    rows = ilargi_db.cross_validate(
        database, QUERY, "y", "linear_regression", cv=cv, param_grid={"alpha": ALPHAS}, backend="numpy"
    )
    dense = GridSearchCV(LinearRegression(), {"alpha": ALPHAS}, cv=cv).fit(T, y).cv_results_
    assert [r["params"] for r in rows] == dense["params"]
    assert [r["rank"] for r in rows] == dense["rank_test_score"].tolist()
    np.testing.assert_allclose([r["mean_score"] for r in rows], dense["mean_test_score"], rtol=0, atol=1e-8)
    np.testing.assert_allclose([r["std_score"] for r in rows], dense["std_test_score"], rtol=0, atol=1e-8)
    for k in range(5):
        np.testing.assert_allclose([r["fold_scores"][k] for r in rows], dense[f"split{k}_test_score"], atol=1e-8)
    assert all(r["fit_seconds"] > 0 for r in rows)
    assert pa.Table.from_pylist(rows).num_rows == len(ALPHAS)  # a table DuckDB can query


def test_cross_validate_with_held_out_rows_that_overlap_sums_each_fold_itself(database, join):
    _, y, T = join
    cv = ShuffleSplit(3, test_size=0.3, random_state=5)  # held-out rows repeat across splits
    grid = {"alpha": np.array(ALPHAS)}  # as np.logspace gives them
    rows = ilargi_db.cross_validate(database, QUERY, "y", "linear_regression", cv=cv, param_grid=grid)
    dense = GridSearchCV(LinearRegression(), {"alpha": ALPHAS}, cv=cv).fit(T, y).cv_results_
    assert [r["params"] for r in rows] == dense["params"]
    assert all(type(r["params"]["alpha"]) is float for r in rows)  # plain numbers: JSON and Arrow take them
    np.testing.assert_allclose([r["mean_score"] for r in rows], dense["mean_test_score"], rtol=0, atol=1e-8)


class HalfTrainingKFold(KFold):
    """k-fold held-out rows, each fold training on every other row of the rest: the held-out rows partition
    the rows, but a fold's training rows are not all the others."""

    def split(self, X, y=None, groups=None):
        for train, test in super().split(X, y, groups):
            yield train[::2], test


def test_cross_validate_with_training_rows_short_of_the_rest_sums_each_fold_itself(database, join):
    _, y, T = join
    cv = HalfTrainingKFold(4, shuffle=True, random_state=8)
    rows = ilargi_db.cross_validate(database, QUERY, "y", "linear_regression", cv=cv, param_grid={"alpha": ALPHAS})
    dense = GridSearchCV(LinearRegression(), {"alpha": ALPHAS}, cv=cv).fit(T, y).cv_results_
    np.testing.assert_allclose([r["mean_score"] for r in rows], dense["mean_test_score"], rtol=0, atol=1e-8)


def test_cross_validate_of_a_classifier_takes_a_scorer_and_stratified_folds(database, join):
    _, y, T = join
    con = database
    con.execute(
        "CREATE OR REPLACE VIEW labelled AS "
        "SELECT * REPLACE (CAST(y > (SELECT median(y) FROM sales) AS INTEGER) AS y) FROM sales"
    )
    query = QUERY.replace("FROM sales s", "FROM labelled s")
    label = (y > np.median(y)).astype(int)
    grid = [{"C": [0.01, 1.0]}, {"C": [10.0], "fit_intercept": [False]}]
    rows = ilargi_db.cross_validate(
        con,
        query,
        "y",
        "logistic_regression",
        cv=4,
        param_grid=grid,
        scoring="roc_auc",
        solver="newton",
        backend="numpy",
    )
    search = GridSearchCV(
        LogisticRegression(solver="newton"),
        grid,
        cv=KeyedFolds(4, stratify=True, random_state=0),  # cv=4's folds: the rows dealt by their keys
        scoring="roc_auc",
    )
    dense = search.fit(T, label).cv_results_
    assert [r["params"] for r in rows] == dense["params"]
    np.testing.assert_allclose([r["mean_score"] for r in rows], dense["mean_test_score"], rtol=0, atol=1e-8)


def test_cv_folds_are_the_same_rows_whatever_order_they_come_in(database):
    """cv=k deals each row to a fold by its values: the rows stored shuffled (as a Parquet view without insertion
    order, DuckDB's threads or ties in ORDER BY deliver them) give the same folds, so the same scores."""
    database.execute("CREATE OR REPLACE TABLE shuffled AS SELECT * FROM sales ORDER BY hash(amount, discount)")
    found = [
        ilargi_db.cross_validate(database, query, "y", "linear_regression", cv=4, backend="numpy")[0]["fold_scores"]
        for query in (QUERY, QUERY.replace("FROM sales s", "FROM shuffled s"))
    ]
    np.testing.assert_allclose(found[1], found[0], rtol=1e-9)


def test_keyed_folds_deal_every_class_evenly_into_folds_of_equal_size():
    y = np.repeat([0, 1, 2], [10, 7, 13])
    X = np.random.default_rng(3).normal(size=(30, 2))
    tests = [test for _, test in KeyedFolds(3, stratify=True).split(X, y)]
    assert sorted(np.concatenate(tests).tolist()) == list(range(30))
    assert [len(t) for t in tests] == [10, 10, 10]
    for label, count in zip((0, 1, 2), (10, 7, 13)):
        assert all(abs(np.sum(y[t] == label) - count / 3) < 1 for t in tests)


@pytest.fixture()
def small():
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, (range < 3)::INTEGER AS c, range * 2.0 AS y FROM range(30)")
    return con


@pytest.mark.parametrize(
    ("query", "target", "algorithm", "message"),
    [
        ("SELECT x, y FROM t WHERE x < 3", "y", "linear_regression", "cv=5: 5 folds need at least 5 rows, and the "),
        ("SELECT x, c FROM t", "c", "logistic_regression", "cv=5: the class 1 has 3 rows, fewer than the 5 folds"),
        ("SELECT x, c FROM t WHERE c = 0", "c", "logistic_regression", "needs two classes or more to fit"),
    ],
)
def test_folds_that_cannot_all_be_scored_are_refused_before_any_fit(small, query, target, algorithm, message):
    with pytest.raises(IlargiError, match=message):
        ilargi_db.cross_validate(small, query, target, algorithm, cv=5)


@pytest.mark.parametrize(
    ("algorithm", "scoring", "message"),
    [
        ("linear_regression", "roc_auc", "scoring='roc_auc' cannot score linear_regression \\(a regression\\)"),
        ("linear_regression", "accuracy", "scoring='accuracy' cannot score linear_regression"),
        (
            "linear_svc",
            "neg_log_loss",
            "scoring='neg_log_loss' cannot score linear_svc \\(a classifier\\): .*predict_proba",
        ),
    ],
)
def test_a_scorer_that_cannot_score_the_model_is_refused_before_reading(algorithm, scoring, message):
    con = duckdb.connect()  # no tables: any read would fail with another error
    with pytest.raises(IlargiError, match=message):
        ilargi_db.cross_validate(con, "SELECT f.x, f.y FROM missing f", "y", algorithm, scoring=scoring)


def test_a_scorer_of_two_classes_is_refused_for_three_before_any_fold_is_fitted(small):
    with pytest.raises(IlargiError, match="scoring='roc_auc' cannot score logistic_regression"):
        ilargi_db.cross_validate(
            small, "SELECT x, (x % 3)::INTEGER AS k FROM t", "k", "logistic_regression", cv=3, scoring="roc_auc"
        )


def test_interrupt_training_stops_cross_validate_between_fits(small):
    scored = []

    def interrupting(estimator, X, y):  # a scorer that asks every job to stop, as another thread would
        if isinstance(X, NormalizedMatrix):  # a fold's held-out rows (not the scorer's check on made-up rows)
            scored.append(ilargi_db.interrupt_training())
        return 0.0

    with pytest.raises(TrainingInterrupted):
        ilargi_db.cross_validate(
            small,
            "SELECT x, y FROM t",
            "y",
            "linear_regression",
            cv=3,
            param_grid={"alpha": [0.1, 1.0]},
            scoring=interrupting,
        )
    assert scored == [1]  # one job running; stopped before the next fold's fit


@pytest.mark.parametrize(
    ("algorithm", "settings", "message"),
    [
        ("kmeans", {}, "supervised models, one of linear_regression"),
        ("gradient_boosting", {"param_grid": {"max_bins": [16, 32]}}, "bins them once: search one max_bins"),
        ("linear_regression", {"param_grid": {"alfa": [1.0]}}, "unknown parameter"),
        ("linear_regression", {"param_grid": {"alpha": [-1.0]}}, "'alpha' parameter of LinearRegression"),
        ("linear_regression", {"alpha": 1.0, "param_grid": {"alpha": [2.0]}}, "both as a parameter and in param_grid"),
        ("linear_regression", {"cv": 1}, "the number of folds"),
    ],
)
def test_cross_validate_refuses_bad_settings_before_reading(algorithm, settings, message):
    con = duckdb.connect()  # no tables: any read would fail with another error
    with pytest.raises(ValueError, match=message):  # IlargiError, or scikit-learn's for a parameter's value
        ilargi_db.cross_validate(con, "SELECT f.x, f.y FROM missing f", "y", algorithm, **settings)


def test_a_search_with_worker_processes_sends_them_the_normalized_matrix(join):
    X, y, T = join
    cv = KFold(3, shuffle=True, random_state=6)
    factorized = GridSearchCV(LinearRegression(), {"alpha": ALPHAS}, cv=cv, n_jobs=2).fit(X, y)
    dense = GridSearchCV(LinearRegression(), {"alpha": ALPHAS}, cv=cv).fit(T, y)
    np.testing.assert_allclose(
        factorized.cv_results_["mean_test_score"], dense.cv_results_["mean_test_score"], rtol=0, atol=1e-8
    )


def test_a_scikit_learn_step_that_needs_a_dense_array_says_how_to_keep_the_join_factorized(join):
    X, y, _ = join
    with pytest.raises(IlargiError, match="ilargi_db.models.StandardScaler"):
        Pipeline([("scale", DenseScaler()), ("model", LinearRegression())]).fit(X, y)


def test_scaling_sparse_one_hot_rows_without_centering_keeps_them_sparse():
    import scipy.sparse

    rows = np.arange(6)
    X = scipy.sparse.csr_matrix((rows + 1.0, (rows, rows % 3)), shape=(6, 3))
    scaled = StandardScaler(with_mean=False).fit(X).transform(X)
    assert scipy.sparse.issparse(scaled)
    expected = DenseScaler(with_mean=False).fit(X.toarray()).transform(X.toarray())
    np.testing.assert_allclose(scaled.toarray(), expected, rtol=1e-12)


def test_cross_validate_standardizes_each_fold_at_its_own_training_rows(database, join):
    """standardize=True (train's setting): each fold's columns scaled by its training rows' mean and deviation,
    as scikit-learn's StandardScaler in a pipeline on the materialized join."""
    _, y, T = join
    cv = KFold(4, shuffle=True, random_state=1)
    rows = ilargi_db.cross_validate(
        database, QUERY, "y", "linear_regression", cv=cv, param_grid={"alpha": ALPHAS}, standardize=True
    )
    dense = GridSearchCV(
        Pipeline([("scale", DenseScaler()), ("model", LinearRegression())]), {"model__alpha": ALPHAS}, cv=cv
    ).fit(T, y)
    np.testing.assert_allclose([r["mean_score"] for r in rows], dense.cv_results_["mean_test_score"], atol=1e-8)
    assert [r["rank"] for r in rows] == dense.cv_results_["rank_test_score"].tolist()


def test_cross_validate_reads_as_train_reads_by_default_and_refuses_standardized_trees(database):
    """impute=True by default, as train: a NULL feature (a customer of no region) is the training mean, so the
    scores are a training's; standardize is refused for trees before anything is read."""
    imputed = ilargi_db.cross_validate(database, QUERY, "y", "linear_regression", cv=3)
    as_is = ilargi_db.cross_validate(database, QUERY, "y", "linear_regression", cv=3, impute=False)
    assert imputed[0]["fold_scores"] != as_is[0]["fold_scores"]
    with pytest.raises(IlargiError, match="standardize=True is for linear"):
        ilargi_db.cross_validate(duckdb.connect(), "SELECT x, y FROM missing", "y", "random_forest", standardize=True)


# -- trees ------------------------------------------------------------------------------------------------------

TREES = {"n_estimators": 5, "max_leaves": 8, "min_samples_leaf": 5}


@pytest.mark.parametrize("algorithm", ["gradient_boosting", "random_forest"])
def test_cross_validate_of_trees_scores_each_fold_as_the_estimator_fitted_on_its_binned_rows(database, algorithm):
    """The binned rows read once; each fold's score is the estimator's, fitted on that fold's rows of them (seeded
    with the folds' random_state)."""
    from ilargi_db.models.catalog import make_estimator
    from ilargi_db.normalization import binned_rows

    grid = {"learning_rate": [0.1, 0.5]} if algorithm == "gradient_boosting" else {"max_features": [1, None]}
    rows = ilargi_db.cross_validate(database, QUERY, "y", algorithm, cv=3, param_grid=grid, random_state=2, **TREES)
    X, y = binned_rows(database, QUERY, "y")
    folds = list(KeyedFolds(3, random_state=2).split(X, y))
    for row in rows:
        expected = [
            make_estimator(algorithm, {**TREES, "random_state": 2, **row["params"]})
            .fit(X[train], y[train])
            .score(X[test], y[test])
            for train, test in folds
        ]
        np.testing.assert_allclose(row["fold_scores"], expected, rtol=1e-12)
    assert sorted(r["rank"] for r in rows) == [1, 2]


def test_cross_validate_of_multi_class_boosting_stratifies_and_scores_log_loss(database):
    """Three classes: folds stratified by class (each holds out a quarter of every class, within a row), each
    scored by the log loss of the model fitted on the other folds' binned rows."""
    from sklearn.metrics import get_scorer

    from ilargi_db.models.catalog import make_estimator
    from ilargi_db.normalization import binned_rows

    query = QUERY.replace("s.y", "CAST(floor(s.amount / 10) % 3 AS INTEGER) AS band")
    rows = ilargi_db.cross_validate(
        database, query, "band", "gradient_boosting", cv=4, objective="log_loss", scoring="neg_log_loss", **TREES
    )
    X, y = binned_rows(database, query, "band")
    folds = list(KeyedFolds(4, stratify=True, random_state=0).split(X, y))
    for _, test in folds:
        for label in np.unique(y):
            assert abs((y[test] == label).sum() - (y == label).sum() / 4) <= 1
    scorer = get_scorer("neg_log_loss")
    expected = [
        scorer(make_estimator("gradient_boosting", {**TREES, "objective": "log_loss", "random_state": 0}).fit(
            X[train], y[train]), X[test], y[test])
        for train, test in folds
    ]  # fmt: skip
    np.testing.assert_allclose(rows[0]["fold_scores"], expected, rtol=1e-12)
    with pytest.raises(IlargiError, match="cannot score gradient_boosting"):
        ilargi_db.cross_validate(database, query, "band", "gradient_boosting", objective="log_loss", scoring="roc_auc")
