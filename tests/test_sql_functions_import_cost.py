"""A new process pays for what it uses: ``import ilargi_db`` and ``ilargi_db.connect()`` load DuckDB (and NumPy), not
the training stack; the first SQL function call loads it then (issue 37). Training, scoring and saving, from SQL or
Python, never load scikit-learn (0.9 s of a new process): the estimators have a base of their own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

TRAINING_STACK = ("sklearn", "scipy", "pandas", "numba", "sqlglot", "pyarrow")


def loaded_after(code: str) -> list[str]:
    """Which of TRAINING_STACK a fresh interpreter has imported after running ``code``."""
    listing = f"sorted(m for m in {TRAINING_STACK!r} if m in sys.modules)"
    probe = f"import sys, json\n{code}\nprint(json.dumps({listing}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    "code",
    [
        "import ilargi_db",
        "import ilargi_db; con = ilargi_db.connect()",
        "import ilargi_db, duckdb; con = ilargi_db.install(duckdb.connect())",
        "import ilargi_db; con = ilargi_db.connect(); con.sql('SELECT count(*) FROM ilargi.models').fetchall()",
    ],
)
def test_connecting_loads_none_of_the_training_stack(code):
    assert loaded_after(code) == []


def test_the_first_sql_function_call_loads_what_it_needs():
    code = "import ilargi_db; con = ilargi_db.connect(); print(con.sql('SELECT ilargi_artifacts()').fetchall())"
    assert "sqlglot" in loaded_after(code)  # the implementations load with the first call, and run


TRAININGS = """
import ilargi_db
con = ilargi_db.connect()
con.execute(
    "CREATE TABLE t AS SELECT range % 10 AS x, CASE WHEN range % 13 = 0 THEN NULL ELSE range % 7 END AS z, "
    "CASE WHEN range % 11 = 0 THEN NULL ELSE 'q' || (range % 5)::VARCHAR END AS cat, "
    "(range % 10) * 2.5 + 0.1 AS y, range % 3 = 0 AS c, "
    "'k' || (range % 3)::VARCHAR AS label FROM range(3000)"
)
for algorithm, target in [
    ("linear_regression", "y"), ("logistic_regression", "c"), ("logistic_regression", "label"), ("linear_svc", "c"),
    ("gradient_boosting", "y"), ("gradient_boosting", "label"), ("random_forest", "c"), ("kmeans", None),
]:
    query = f"SELECT x, z, cat{', ' + target if target else ''} FROM t"
    model = ilargi_db.train(con, query, target, algorithm, reuse=False, n_estimators=3) if "forest" in algorithm \
        or "boosting" in algorithm else ilargi_db.train(con, query, target, algorithm, reuse=False)
    ilargi_db.predict(con, model, "SELECT x, z, cat FROM t")
"""
SAVING = """
ilargi_db.save_model(con, "m", model)
options = '{"n_estimators": 3}'
con.execute(f"SELECT ilargi_train('n', 'gradient_boosting', 'SELECT x, z, cat, y FROM t', 'y', '{options}')").fetchall()
con.execute("SELECT n_predict(x, z, cat) FROM t").fetchall()
"""


def test_training_and_scoring_load_neither_scikit_learn_nor_pandas():
    """Numbers and text leave and enter Arrow through their buffers: pyarrow imports pandas (0.25 s) for an array
    or a scalar it makes from Python or NumPy values."""
    loaded = loaded_after(TRAININGS)
    assert "sklearn" not in loaded and "pandas" not in loaded


def test_saving_and_sql_trainings_load_no_scikit_learn():
    assert "sklearn" not in loaded_after(TRAININGS + SAVING)
