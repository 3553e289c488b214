"""The options reference (``ilargi options``, ``ilargi_db.options``, docs/options.md) is read from the declarations
the checks use: every parameter documented, every listed default accepted, the file never stale."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import ilargi_db
from ilargi_db.models.catalog import NAMES, TRAIN_SETTINGS, estimator_class
from ilargi_db.models.options_reference import algorithm_options, options_markdown

DOCS = Path(__file__).resolve().parent.parent / "docs" / "options.md"


def test_docs_options_md_is_what_the_declarations_say():
    assert DOCS.read_text() == options_markdown(), "run `ilargi options --reference > docs/options.md`"


@pytest.mark.parametrize("algorithm", NAMES)
def test_every_parameter_is_listed_documented_and_checked(algorithm):
    rows = algorithm_options(algorithm)
    assert [r.name for r in rows] == list(inspect.signature(estimator_class(algorithm)).parameters)
    undocumented = [r.name for r in rows if not r.meaning]
    unchecked = [r.name for r in rows if r.accepts == "any value"]
    assert not undocumented, f"describe these in {estimator_class(algorithm).__name__}'s docstring: {undocumented}"
    assert not unchecked, f"declare these in _parameter_constraints: {unchecked}"


def test_the_settings_come_after_an_algorithms_parameters_and_alone_without_one():
    settings = [s.name for s in TRAIN_SETTINGS]
    assert [o.name for o in ilargi_db.options()] == settings
    listed = [o.name for o in ilargi_db.options("linear_svc")]
    assert listed[-len(settings) :] == settings and listed[0] == "C"


def test_an_unknown_algorithm_names_the_choices():
    with pytest.raises(ilargi_db.IlargiError, match="unknown algorithm 'svm': choose one of linear_regression"):
        ilargi_db.options("svm")


def test_a_choice_is_listed_in_a_stable_order():
    """A set's order changes from one process to the next: the reference sorts the choices it lists."""
    solver = next(o for o in ilargi_db.options("linear_regression") if o.name == "solver")
    assert solver.accepts == 'one of "auto", "cg", "duhl", "gd", "normal"'
