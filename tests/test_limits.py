"""Sizes bounded before anything is allocated (ilargi_db.limits): a tree model's macro (its nodes, the categories
it lists and its groups' models counted together) and a search's parameter sets, each refused with an error naming
the limit and the environment variable that raises it; and tree options that would fail late refused up front."""

from __future__ import annotations

import json

import duckdb
import pytest

import ilargi_db
from ilargi_db import IlargiError, cli
from ilargi_db.limits import GRID_SETS, MACRO_NODES
from ilargi_db.sql_functions.tree_leaf_masks import fits_leaf_masks
from ilargi_db.sql_functions.tree_macros import listed_categories, macro_nodes

QUERY = "SELECT counted(f.x) AS x, d.kind, f.store, f.y FROM f JOIN d USING (k)"
NUMERIC = "SELECT counted(f.x) AS x, f.store, f.y FROM f"  # no category: a macro of its trees' nodes alone


@pytest.fixture()
def reads() -> list[int]:
    """The rows ``counted`` saw (a training's reads of f.x)."""
    return [0]


@pytest.fixture()
def con(reads) -> duckdb.DuckDBPyConnection:
    """Six stores, a dimension of 40 kinds, and a UDF counting the rows a training reads."""
    con = ilargi_db.connect()
    con.execute("CREATE TABLE d AS SELECT range AS k, 'kind' || range AS kind FROM range(40)")
    con.execute(
        "CREATE TABLE f AS SELECT range AS id, range % 40 AS k, range % 6 AS store, (range % 13) * 1.0 AS x, "
        "(range % 40) * 2.0 + (range % 13) AS y FROM range(1200)"
    )

    def counted(x: float) -> float:
        reads[0] += 1
        return x

    con.create_function("counted", counted)
    return con


def sql_train(con: duckdb.DuckDBPyConnection, query: str = QUERY, **options) -> dict:
    """``ilargi_train`` of a tree model named m from SQL, whose macro bounds its size; its summary."""
    found = con.execute("SELECT ilargi_train('m', 'gradient_boosting', ?, 'y', ?)", [query, json.dumps(options)])
    return json.loads(found.fetchall()[0][0])


def test_more_trees_than_a_macro_holds_are_refused_before_anything_is_read(con, reads):
    # 2,000 trees of up to 31 leaves: up to 122,000 nodes, more than the 100,000 by default.
    with pytest.raises(duckdb.Error, match=r"n_estimators=2000 .* 122,000 nodes.*ILARGI_MAX_MACRO_NODES=") as err:
        sql_train(con, n_estimators=2000, min_samples_leaf=600)
    assert "100,000" in str(err.value) and reads == [0]


def test_a_model_trained_in_python_is_bounded_only_when_saved(con):
    # No macro is written: as LightGBM, any n_estimators (early stopping often stops far below it).
    model = ilargi_db.train(con, QUERY, "y", algorithm="gradient_boosting", n_estimators=2000, min_samples_leaf=600)
    assert model.n_iter_ == 2000  # each tree a leaf: 600 rows a leaf cannot split 1,200
    ilargi_db.save_model(con, "leaves", model)  # 2,000 nodes: the exact count fits


def test_max_depth_bounds_a_trees_nodes_as_max_leaves_does(con, monkeypatch):
    monkeypatch.setenv(MACRO_NODES.variable, "70")  # 10 trees of depth 2: 4 leaves, 7 nodes each
    assert sql_train(con, NUMERIC, n_estimators=10, max_depth=2, min_samples_leaf=600)["version"] == 1
    with pytest.raises(duckdb.Error, match=r"max_depth=3 may grow 150 nodes, more than the 70 "):
        sql_train(con, n_estimators=10, max_depth=3)


def test_the_limit_is_raised_by_its_environment_variable_and_a_bad_one_is_named(con, monkeypatch):
    monkeypatch.setenv(MACRO_NODES.variable, "200_000")
    assert sql_train(con, n_estimators=2000, min_samples_leaf=600)["version"] == 1
    monkeypatch.setenv(MACRO_NODES.variable, "lots")
    with pytest.raises(duckdb.Error, match=r"ILARGI_MAX_MACRO_NODES='lots' must be a positive integer"):
        sql_train(con)


def test_groups_count_together_against_one_macro_as_they_are_fitted(con, monkeypatch):
    # Six stores' models go into one macro: their nodes are counted as each group is fitted, and the training
    # stops at the first group that takes the total over the limit (the groups after it are not fitted).
    params = {"n_estimators": 10, "max_leaves": 4, "group_by": "store"}
    grouped = ilargi_db.train(con, NUMERIC, "y", algorithm="gradient_boosting", **params)  # Python: not bounded
    sizes = [one.trees_.n_nodes for one in grouped.models_.values()]
    assert len(sizes) == 6
    monkeypatch.setenv(MACRO_NODES.variable, str(sum(sizes[:3])))  # each model alone fits, three of them too
    with pytest.raises(duckdb.Error, match=rf"first 4 of 6 groups \(group_by\) grew {sum(sizes[:4]):,} tree nodes"):
        sql_train(con, NUMERIC, **params)
    monkeypatch.setenv(MACRO_NODES.variable, str(sum(sizes)))
    assert sql_train(con, NUMERIC, **params)["groups"] == 6


def test_saving_counts_every_groups_nodes_in_the_one_macro(con, monkeypatch):
    model = ilargi_db.train(con, QUERY, "y", group_by="store", algorithm="gradient_boosting", n_estimators=5)
    total = macro_nodes(list(model.models_.values()), grouped=True, group_type=model.group_type_)
    assert total > max(macro_nodes([one], grouped=True, group_type=model.group_type_) for one in model.models_.values())
    monkeypatch.setenv(MACRO_NODES.variable, str(total - 1))  # each group's macro alone fits
    with pytest.raises(IlargiError, match=rf"\(all groups\) would hold {total:,} nodes.*ILARGI_MAX_MACRO_NODES"):
        ilargi_db.save_model(con, "per_store", model)
    macros = "SELECT count(*) FROM duckdb_functions() WHERE function_name LIKE 'per_store%'"
    assert con.execute(macros).fetchone()[0] == 0
    monkeypatch.setenv(MACRO_NODES.variable, str(total))
    ilargi_db.save_model(con, "per_store", model)


def test_listed_categories_count_as_nodes(con, monkeypatch):
    model = ilargi_db.train(con, QUERY.replace(", f.store", ""), "y", algorithm="gradient_boosting", n_estimators=3)
    nodes = model.trees_.n_nodes
    assert macro_nodes([model]) > nodes  # the kinds split natively: the macro lists their categories
    monkeypatch.setenv(MACRO_NODES.variable, str(nodes))
    with pytest.raises(IlargiError, match=rf"would hold {macro_nodes([model]):,} nodes and listed categories"):
        ilargi_db.save_model(con, "typed", model)
    monkeypatch.setenv(MACRO_NODES.variable, str(macro_nodes([model])))
    ilargi_db.save_model(con, "typed", model)
    statement = con.execute("SELECT macro_definition FROM duckdb_functions() WHERE function_name = 'typed_predict'")
    assert statement.fetchone()[0].count("'kind") == macro_nodes([model]) - nodes  # each entry counted is written


def test_a_models_categories_are_listed_once_however_many_splits_read_them():
    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT 'k' || (range % 200)::VARCHAR AS k, range % 200 * 0.1 AS y FROM range(4000)")
    model = ilargi_db.train(con, "SELECT k, y FROM t", "y", algorithm="gradient_boosting", n_estimators=3)
    assert model.trees_.feature.max() == 0 and macro_nodes([model]) == model.trees_.n_nodes + 200
    ilargi_db.save_model(con, "keys", model)
    statement = con.execute("SELECT macro_definition FROM duckdb_functions() WHERE function_name = 'keys_predict'")
    assert statement.fetchone()[0].count("'k1'") == 1
    assert macro_nodes([model], grouped=True, group_type="VARCHAR") == model.trees_.n_nodes + 200  # grouped too
    # A model per group of trees over 63 leaves writes each group's splits: a split of a feature of many categories
    # lists them.
    wide = ilargi_db.train(con, "SELECT k, y FROM t", "y", "gradient_boosting", n_estimators=2, max_leaves=80)
    assert not fits_leaf_masks(wide.trees_)
    assert macro_nodes([wide], grouped=True) == wide.trees_.n_nodes + sum(
        len(listed_categories(wide.bins_[0], wide.trees_.category_bins(n), wide.trees_.missing_left(n)))
        for n in range(wide.trees_.n_nodes)
        if wide.trees_.feature[n] == 0
    )


def test_a_grid_of_more_sets_than_the_limit_is_refused_before_any_set_is_built(con, monkeypatch):
    monkeypatch.setenv(GRID_SETS.variable, "5")
    query = "SELECT f.x, d.kind, f.y FROM f JOIN d USING (k)"
    grid = [{"alpha": [0.1, 1.0]}, {"alpha": [10.0], "fit_intercept": [True, False]}]  # 4 sets
    assert len(ilargi_db.cross_validate(con, query, "y", "linear_regression", cv=2, param_grid=grid)) == 4
    grid = {"alpha": [0.1, 1.0, 10.0], "fit_intercept": [True, False]}
    with pytest.raises(IlargiError, match=r"param_grid names 6 parameter sets, more than the 5 .*ILARGI_MAX_GRID_SETS"):
        ilargi_db.cross_validate(con, query, "y", "linear_regression", cv=2, param_grid=grid)


def test_a_learning_rate_above_one_is_refused_before_anything_is_read(con, reads):
    with pytest.raises(ValueError, match=r"learning_rate"):
        ilargi_db.train(con, QUERY, "y", algorithm="gradient_boosting", learning_rate=1e308)
    assert reads == [0]


def test_early_stopping_on_one_row_says_so(con):
    with pytest.raises(ValueError, match=r"early_stopping .* 1 row leaves none to train on"):
        ilargi_db.train(con, QUERY + " LIMIT 1", "y", algorithm="gradient_boosting", early_stopping=True)


def test_explain_refuses_what_train_would(con, reads):
    explained = "SELECT ilargi_explain('gradient_boosting', ?, 'y', '{\"n_estimators\": 100000000}')"
    with pytest.raises(duckdb.Error, match=r"may grow 6,100,000,000 nodes.*ILARGI_MAX_MACRO_NODES"):
        con.execute(explained, [QUERY]).fetchall()
    assert reads == [0]


def test_the_command_line_names_its_grid_flag_and_the_variable(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "grid.duckdb")
    with duckdb.connect(path) as plain:
        plain.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, range * 2.0 + 1 AS y FROM range(60)")
    monkeypatch.setenv(GRID_SETS.variable, "2")
    grid = '{"alpha": [0.1, 1.0, 10.0]}'
    argv = ["cross-validate", "linear_regression", "SELECT x, y FROM t", "--target", "y", "--grid", grid, "--db", path]
    assert cli.main(argv) == 1
    assert "--grid names 3 parameter sets, more than the 2 a search tries" in capsys.readouterr().err
    monkeypatch.setenv(GRID_SETS.variable, "3")
    assert cli.main(argv) == 0


def test_a_model_per_group_is_counted_as_the_macro_its_group_column_gets(monkeypatch):
    """An INTERVAL group column keeps the CASE macro (tree_leaf_masks.groups_read_apart), whose IN lists count: the
    limit counts that macro, not the leaf masks another group type would get."""
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range AS id, 'k' || (range % 30)::VARCHAR AS team, (range % 50)::DOUBLE AS x, "
        "[INTERVAL '1 day', INTERVAL '2 days'][range % 2 + 1] AS g, (range % 30) * (range % 2 + 1) + x AS y "
        "FROM range(3000)"
    )
    model = ilargi_db.train(con, "SELECT team, x, g, y FROM t", "y", "gradient_boosting", group_by="g", n_estimators=5)
    models = list(model.models_.values())
    as_cases = macro_nodes(models, grouped=True, group_type=model.group_type_)
    assert model.group_type_ == "INTERVAL" and as_cases > macro_nodes(models, grouped=True, group_type="VARCHAR")
    monkeypatch.setenv(MACRO_NODES.variable, str(as_cases - 1))
    with pytest.raises(IlargiError, match=rf"\(all groups\) would hold {as_cases:,} nodes"):
        ilargi_db.save_model(con, "by_interval", model)
    monkeypatch.setenv(MACRO_NODES.variable, str(as_cases))
    ilargi_db.save_model(con, "by_interval", model)
