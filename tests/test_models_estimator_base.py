"""The estimators' own base (models/estimator.py) keeps scikit-learn's contract without importing it: each
parameter constraint accepts what scikit-learn's accepts and refuses in its words, and the errors and warnings
are scikit-learn's classes too once it is loaded (its checks, and users' ``except`` and filters, catch them)."""

from __future__ import annotations

import numbers
import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.utils._param_validation import Interval as SklearnInterval
from sklearn.utils._param_validation import InvalidParameterError as SklearnInvalidParameterError
from sklearn.utils._param_validation import StrOptions as SklearnStrOptions
from sklearn.utils._param_validation import validate_parameter_constraints

import ilargi_db
from ilargi_db.models import estimator as base
from ilargi_db.models.algorithm import JoinEstimator
from ilargi_db.models.catalog import NAMES, estimator_class

ESTIMATORS = [
    cls
    for name in ilargi_db.models.__all__
    if isinstance(cls := getattr(ilargi_db.models, name), type) and issubclass(cls, base.Estimator)
]


def as_scikit_learns(constraint):
    """The same constraint in scikit-learn's types (the oracle)."""
    if isinstance(constraint, base.Interval):
        return SklearnInterval(constraint.kind, constraint.left, constraint.right, closed=constraint.closed)
    if isinstance(constraint, base.StrOptions):
        return SklearnStrOptions(constraint.options)
    return constraint


DECLARED = [(cls, name, allowed) for cls in ESTIMATORS for name, allowed in cls._parameter_constraints.items()]
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 2**33),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["auto", "lbfgs", "l2", "random", "k-means++", "squared_error", "x", ""]),
    st.lists(st.integers(0, 3), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(declared=st.sampled_from(DECLARED), value=VALUES)
def test_a_constraint_accepts_what_scikit_learns_accepts_and_refuses_in_its_words(declared, value):
    cls, name, allowed = declared
    ours, theirs = None, None
    try:
        base.check_parameters({name: allowed}, {name: value}, cls.__name__)
    except base.InvalidParameterError as err:
        ours = str(err)
    try:
        validate_parameter_constraints({name: [as_scikit_learns(c) for c in allowed]}, {name: value}, cls.__name__)
    except SklearnInvalidParameterError as err:
        theirs = str(err)
    if any(isinstance(c, base.StrOptions) for c in allowed) and theirs is not None:  # sets print in any order
        ours, theirs = ours and ours.split(" among ")[0], theirs.split(" among ")[0]
    assert ours == theirs


def test_an_unfitted_estimator_raises_scikit_learns_error_and_ours():
    model = ilargi_db.LinearRegression()
    with pytest.raises(SklearnNotFittedError) as raised:
        model.predict(np.zeros((2, 1)))
    assert isinstance(raised.value, ilargi_db.NotFittedError)


def test_the_errors_pickle_as_ilargi_dbs_own():
    """Sent between processes (multiprocessing pickles exceptions), an error arrives as ilargi_db's class."""
    with pytest.raises(SklearnNotFittedError) as raised:
        ilargi_db.KMeans().transform(np.zeros((2, 2)))
    again = pickle.loads(pickle.dumps(raised.value))
    assert type(again) is ilargi_db.NotFittedError and again.args == raised.value.args


def test_a_bad_parameter_raises_scikit_learns_error_and_ours():
    with pytest.raises(SklearnInvalidParameterError, match="The 'alpha' parameter of LinearRegression") as raised:
        ilargi_db.LinearRegression(alpha=-1.0).fit(np.eye(3), np.ones(3))
    assert isinstance(raised.value, ilargi_db.InvalidParameterError)


def test_a_fit_stopped_short_warns_so_that_either_filter_catches_it():
    X = np.random.default_rng(0).normal(size=(60, 3)) * [1.0, 1e3, 1e-3]
    y = (X[:, 0] > 0).astype(int)
    for category in (SklearnConvergenceWarning, ilargi_db.ConvergenceWarning):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ilargi_db.LogisticRegression(max_iter=1).fit(X, y)
        assert any(issubclass(w.category, category) for w in caught)


def test_clone_gives_an_unfitted_estimator_with_copies_of_the_parameters():
    model = ilargi_db.KMeans(n_clusters=3, init=np.zeros((3, 2))).fit(np.eye(4, 2))
    copy = base.clone(model)
    assert not hasattr(copy, "cluster_centers_") and copy.n_clusters == 3
    assert copy.init is not model.init and np.array_equal(copy.init, model.init)
    assert repr(ilargi_db.KMeans(n_clusters=3)) == "KMeans(n_clusters=3)"


def test_an_interval_of_integers_takes_a_bool_as_scikit_learn_does_and_train_refuses_it():
    integers = base.Interval(numbers.Integral, 1, None, closed="left")
    assert integers.accepts(3) and integers.accepts(True) and not integers.accepts(2.0)
    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT range AS x, range * 2.0 AS y FROM range(10)")
    with pytest.raises(ilargi_db.IlargiError, match="a bool is not a number here"):
        ilargi_db.train(con, "SELECT x, y FROM t", "y", "linear_regression", max_iter=True)


@pytest.mark.parametrize("algorithm", NAMES)
def test_every_algorithm_answers_what_the_pipeline_asks(algorithm):
    """Each estimator implements the JoinEstimator protocol: the pipeline asks it, never switches on its name."""
    estimator = estimator_class(algorithm)()
    assert isinstance(estimator, JoinEstimator)
    assert estimator.classifies(None) in (True, False, None)
    assert estimator.takes_start(3, np.array([0.0, 1.0])) in (True, False)


def test_a_value_changed_after_the_edge_check_is_checked_again_in_fit():
    """train checks the parameters once, before any read (make_estimator), and fit finds them checked; a value
    set after that check is not taken on trust."""
    from ilargi_db.models.catalog import make_estimator

    X, y = np.arange(8.0).reshape(4, 2), np.arange(4.0)
    model = make_estimator("linear_regression", {"alpha": 1.0})
    model.fit(X, y)
    model.set_params(alpha=-1.0)
    with pytest.raises(ilargi_db.InvalidParameterError, match="'alpha' parameter of LinearRegression must be"):
        model.fit(X, y)
    with pytest.raises(ilargi_db.InvalidParameterError):
        make_estimator("linear_regression", {"alpha": -1.0})
