"""``ilargi_cross_validate``: :func:`ilargi_db.cross_validate` in SQL, a table of one row per parameter set.

DuckDB's Python API registers scalar functions only: the UDF returns the rows as a JSON array, and the public
name is a TEMP table macro that unnests it into the typed columns of ``COLUMNS``. Its options JSON holds the
search's own settings (``SEARCH_OPTIONS``), the estimator's parameters every set shares, and the settings of
``train`` that ``cross_validate`` takes (``backend``, ``impute``, ``standardize``); every one is checked before
anything is read.
Cross-validation stores no model: ``normalize`` reads in one read-only snapshot and nothing is written, so it
runs on a database opened read-only too.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from ilargi_db.errors import CALLER, IlargiError
from ilargi_db.models.catalog import SETTINGS, check_known_settings, estimator_class
from ilargi_db.models.parameter_kinds import check_json_types
from ilargi_db.sql_functions.options import load_json, parse_options, required

# The result's columns and their DuckDB types, in order: the table macro's and the command line's table.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("params", "JSON"),
    ("rank", "INTEGER"),
    ("mean_score", "DOUBLE"),
    ("std_score", "DOUBLE"),
    ("fold_scores", "DOUBLE[]"),
    ("fit_seconds", "DOUBLE"),
)
# The options that set the search (cross_validate's arguments); the others are the estimator's or train's.
SEARCH_OPTIONS = ("cv", "param_grid", "scoring", "random_state")
# Of train's settings, those cross_validate takes (it fits the normalized matrix: no strategy, nothing stored).
TRAIN_SETTINGS_TAKEN = ("backend", "impute", "standardize")
MAX_SEED = 2**32 - 1  # scikit-learn's splitters take a seed of NumPy's legacy generator, 0 to 2^32 - 1
# The command line's flags for the search options (``ilargi cross-validate --cv 5 --grid ...``).
CLI_FLAGS = {"cv": "--cv", "param_grid": "--grid", "scoring": "--scoring"}


def cross_validate_rows(
    con: duckdb.DuckDBPyConnection, algorithm: str, query: str, target: str | None, options: str | None
) -> list[dict]:
    """``cross_validate``'s rows for the options JSON, every option checked before anything is read.

    ``ilargi_cross_validate`` runs it on its own cursor; ``ilargi cross-validate`` calls it directly.
    """
    from ilargi_db.model_selection import check_cross_validated, cross_validate  # the training stack: on first use

    algorithm = required(algorithm, "the algorithm")
    query = required(query, "the training query")
    check_cross_validated(algorithm, target)
    example = """'{"cv": 5, "param_grid": {"alpha": [0.1, 1, 10]}}'"""
    given = load_json(options, "options", f"an object such as {example}") if options and options.strip() else {}
    if not isinstance(given, dict):
        raise IlargiError(f"options must be a JSON object such as {example}, got {options!r}.")
    check_known_settings(algorithm, given, (*SEARCH_OPTIONS, *TRAIN_SETTINGS_TAKEN))
    search = search_arguments(algorithm, {k: given.pop(k) for k in SEARCH_OPTIONS if k in given})
    shared = parse_options(algorithm, json.dumps(given), {k: SETTINGS[k] for k in TRAIN_SETTINGS_TAKEN})
    return cross_validate(con, query, target, algorithm, **search, **shared)


def table_select(call: str) -> str:
    """The table macro's body: the JSON array ``call`` returns, one typed row per element."""
    columns = ",\n       ".join(f"CAST(r->'$.{name}' AS {kind}) AS {name}" for name, kind in COLUMNS)
    # One row in, the array unnested there: the UDF (which has side effects) runs once per call.
    return f"SELECT {columns}\nFROM (SELECT unnest(CAST({call} AS JSON[])) AS r)"


def _option(name: str) -> str:
    """How the caller gave search option ``name``: a flag on the command line, an option of the JSON else."""
    return CLI_FLAGS[name] if CALLER.get() == "cli" and name in CLI_FLAGS else f"option {name!r}"


def _grid_example() -> str:
    grid = """'{"alpha": [0.1, 1, 10]}'"""
    return f"--grid {grid}" if CALLER.get() == "cli" else """'{"param_grid": {"alpha": [0.1, 1, 10]}}'"""


def search_arguments(algorithm: str, given: dict[str, Any]) -> dict[str, Any]:
    """``cross_validate``'s keyword arguments from the search options in ``given`` (``SEARCH_OPTIONS``), each
    checked in JSON terms: the grid's names and values against ``algorithm``'s parameters, the scorer's name
    against scikit-learn's."""
    from ilargi_db.model_selection import MIN_FOLDS

    arguments: dict[str, Any] = {}
    if "cv" in given:
        cv = given["cv"]
        if isinstance(cv, bool) or not isinstance(cv, int) or cv < MIN_FOLDS:
            raise IlargiError(
                f"{_option('cv')} must be the number of folds, an integer of {MIN_FOLDS} or more, got {cv!r}."
            )
        arguments["cv"] = cv
    if "param_grid" in given:
        arguments["param_grid"] = _grid(algorithm, given["param_grid"])
    if given.get("scoring") is not None:
        arguments["scoring"] = _scorer(given["scoring"])
    if "random_state" in given:
        seed = given["random_state"]
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
            raise IlargiError(
                f"option 'random_state' must be an integer from 0 to {MAX_SEED} (the folds' shuffle) or null, "
                f"got {seed!r}."
            )
        arguments["random_state"] = seed
    return arguments


def _grid(algorithm: str, grid: Any) -> dict | list[dict]:
    """A JSON object of non-empty arrays (or an array of such objects), each value of a type the parameter takes."""
    grids = grid if isinstance(grid, list) else [grid]
    if not grids or not all(isinstance(g, dict) and g for g in grids):
        raise IlargiError(
            f"{_option('param_grid')} must be a JSON object of arrays, one per parameter to search, such as "
            f"{_grid_example()} (or an array of such objects), got {_short(grid)}."
        )
    estimator = estimator_class(algorithm)
    for one in grids:
        for name, values in one.items():
            if not isinstance(values, list) or not values:
                raise IlargiError(
                    f"{name!r} of {_option('param_grid')} must be a non-empty JSON array of the values to try, such as "
                    f"{_grid_example()}, got {_short(values)}."
                )
            for value in values:
                check_json_types(algorithm, estimator, {name: value})
    return grid


def _scorer(scoring: Any) -> str:
    """A scikit-learn scorer's name (a callable cannot be written in JSON)."""
    from sklearn.metrics import get_scorer_names

    names = get_scorer_names()
    if not isinstance(scoring, str) or scoring not in names:
        common = "r2, neg_mean_squared_error, neg_mean_absolute_error, accuracy, roc_auc, f1, neg_log_loss"
        raise IlargiError(
            f"{_option('scoring')} must name one of scikit-learn's scorers ({common}, ...: "
            f"sklearn.metrics.get_scorer_names() lists the {len(names)}), got {_short(scoring)}."
        )
    return scoring


def _short(value: Any) -> str:
    written = json.dumps(value)
    return written if len(written) <= 60 else written[:57] + "..."


__all__ = [
    "COLUMNS",
    "SEARCH_OPTIONS",
    "TRAIN_SETTINGS_TAKEN",
    "cross_validate_rows",
    "search_arguments",
    "table_select",
]
