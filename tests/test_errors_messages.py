"""Inputs and damaged state that once gave a raw Python or DuckDB error: a message in the caller's terms,
or a fallback that trains as if nothing were wrong."""

from __future__ import annotations

import json

import pytest

import ilargi_db
from ilargi_db.errors import IlargiError


@pytest.fixture
def con():
    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, (range % 3)::DOUBLE AS y FROM range(300)")
    return con


def test_a_query_to_score_is_named_as_such_not_as_the_training_query(con):
    model = ilargi_db.train(con, "SELECT x, y FROM t", "y")
    with pytest.raises(IlargiError, match="^the query to evaluate on has no FROM clause"):
        ilargi_db.evaluate(con, model, "SELECT 1.0 AS x, 2.0 AS y")
    with pytest.raises(IlargiError, match="^the query to predict on has no FROM clause"):
        ilargi_db.predict(con, model, "SELECT 1.0 AS x")
    ilargi_db.save_model(con, "m", model)
    with pytest.raises(IlargiError, match="^the query to predict on has no FROM clause"):
        ilargi_db.prediction_sql(con, ilargi_db.load_model(con, "m"), "SELECT 1.0 AS x")
    with pytest.raises(IlargiError, match="^the training query has no FROM clause"):  # and training still says so
        ilargi_db.train(con, "SELECT 1.0 AS x, 2.0 AS y", "y")


def test_a_binary_only_logistic_solver_refuses_a_target_of_three_classes_as_an_ilargi_error(con):
    # lbfgs fits the multinomial model (tests/test_models_multinomial.py); newton is binary only
    with pytest.raises(IlargiError, match="Only binary classification is supported.*3 classes.*in the query"):
        ilargi_db.train(con, "SELECT x, y FROM t", "y", "logistic_regression", solver="newton")
    with pytest.raises(IlargiError, match="target is continuous"):
        ilargi_db.train(con, "SELECT y, x + 0.5 AS z FROM t", "z", "logistic_regression")


def test_a_shell_user_without_db_is_told_to_pass_it_not_con_register(capsys):
    from ilargi_db import cli

    assert cli.main(["explain", "linear_regression", "SELECT x, y FROM t", "--target", "y"]) == 1
    err = capsys.readouterr().err
    assert "unknown table 't'" in err and "pass --db with the DuckDB file that holds it" in err
    assert "con.register" not in err


def test_dot_commands_run_in_sql_batches_as_in_the_duckdb_shell(tmp_path, capsys):
    from ilargi_db import cli

    db = str(tmp_path / "dots.duckdb")
    batch = "CREATE TABLE sales AS SELECT 1 AS id;\n.tables\n.timer on\nSELECT 42 AS a;"
    assert cli.main(["sql", db, "-c", batch]) == 0
    out = capsys.readouterr().out
    assert "│ main.sales │ table │" in out and "│    42 │" in out and "Run Time: " in out
    script = tmp_path / "job.sql"
    script.write_text("SELECT 1 AS x;\n-- a comment\n.schema sales\n\nSELECT nope\n  FROM sales;\n")
    assert cli.main(["sql", db, "-f", str(script)]) == 1
    captured = capsys.readouterr()
    assert "CREATE TABLE sales(id INTEGER);" in captured.out
    assert "statement 2 (line 5), 'SELECT nope'" in captured.err  # numbered and placed in the whole script
    assert cli.main(["sql", db, "-c", ".nope"]) == 1
    assert "unknown command .nope: .help lists the dot commands." in capsys.readouterr().err


@pytest.mark.parametrize("source, column", [("range(100)", "range"), ("generate_series(0, 99)", "generate_series")])
def test_a_table_functions_default_column_name_is_a_column(con, source, column):
    query = f"SELECT {column}::DOUBLE AS x, (2 * {column} + 1)::DOUBLE AS y FROM {source}"
    for strategy in ("factorized", "materialized"):
        model = ilargi_db.train(con, query, "y", strategy=strategy)
        assert model.coef_ == pytest.approx([2.0]) and model.intercept_ == pytest.approx(1.0)


@pytest.mark.parametrize(
    "column, value",
    [
        ("metrics", "'[1, 2]'"),
        ("metrics", "repeat('[', 100000) || repeat(']', 100000)"),
        ("model", "'{}'"),
        ("preprocessing", "'{}'"),
        ("features", """'{"a": 1}'"""),
        ("parameters", "'[]'"),
        ("algorithm", "'svm'"),
    ],
)
def test_a_damaged_registry_row_is_named_and_listed_not_a_traceback(tmp_path, capsys, column, value):
    from ilargi_db import cli

    db = str(tmp_path / "registry.duckdb")
    con = ilargi_db.connect(db)
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, (range % 3)::DOUBLE AS y FROM range(300)")
    ilargi_db.save_model(con, "m", ilargi_db.train(con, "SELECT x, y FROM t", "y"))
    con.execute(f"UPDATE ilargi.models SET {column} = {value}")
    with pytest.raises(IlargiError, match=r"model 'm' version 1 in ilargi.models is damaged .*drop_model\(con, 'm'\)"):
        ilargi_db.load_model(con, "m")
    con.close()
    assert cli.main(["models", "--db", db]) == 0  # the list still shows every row
    out = capsys.readouterr().out
    assert "linear_regression" in out or "svm" in out
    if column == "metrics":
        assert "(damaged: not a JSON object)" in out


@pytest.mark.parametrize("content", ["[1, 2]", '"text"', "{", '{"%KEY%": {"cores": "many"}}', '{"%KEY%": [1]}'])
def test_a_damaged_hardware_cache_is_measured_again(tmp_path, content):
    from ilargi_db.cost_model.hardware import Hardware, detect_hardware

    detect_hardware(cache=tmp_path, refresh=True)
    key = next(iter(json.loads((tmp_path / "hardware.json").read_text())))  # this machine's entry
    (tmp_path / "hardware.json").write_text(content.replace("%KEY%", key))
    for refresh in (True, False):  # measuring writes the cache back; reading it in a new process
        hw = detect_hardware(cache=tmp_path, refresh=refresh)
        assert isinstance(hw, Hardware) and hw.cores >= 1 and hw.gflops > 0
    assert isinstance(json.loads((tmp_path / "hardware.json").read_text())[key]["cores"], int)


@pytest.mark.parametrize(
    "coefficients",
    [
        {"lmm": {"fixed": "1e-5", "rows": "x"}},
        {"lmm": [1, 2]},
        ["lmm"],
        {"lmm": {"rows": -1.0}},
        {"lmm": {"rows": None}},
    ],
)
def test_damaged_kernel_costs_fall_back_to_the_priors(con, tmp_path, monkeypatch, coefficients):
    from ilargi_db.cost_model.hardware import detect_hardware
    from ilargi_db.cost_model.kernels import FORMAT_VERSION, kernel_costs, kernel_costs_path

    damaged = {"format": FORMAT_VERSION, "coefficients": coefficients, "source": "calibrated", "errors": {}}
    kernel_costs_path("numpy", tmp_path).write_text(json.dumps(damaged))
    costs = kernel_costs(detect_hardware(), "numpy", tmp_path)
    assert not costs.calibrated and costs.seconds("lmm", {"rows": 1e6}) > 0
    monkeypatch.setenv("ILARGI_CACHE_DIR", str(tmp_path))  # where training looks for the calibration
    assert ilargi_db.train(con, "SELECT x, y FROM t", "y").n_rows_ == 300


def test_calibration_times_the_work_so_no_fitted_kernel_prices_a_shape_at_zero(tmp_path):
    from ilargi_db.calibration import calibrate

    result = calibrate(grid="tiny", cache_dir=tmp_path, progress=False)
    # A matrix memoizes X^T X: a repeat on the same matrix copies a d x d result (under a microsecond)
    # instead of reading 20,000 rows. Every timed run must do the work.
    crossprods = [m for m in result.measurements if m.kernel == "crossprod"]
    assert crossprods and all(m.seconds > 5e-6 for m in crossprods), [(m.shape, m.seconds) for m in crossprods]
    for m in result.measurements:  # every shape measured has rows: no coefficient set may price it at 0 s
        assert result.costs.seconds(m.kernel, m.terms) > 0, (m.kernel, m.shape)
