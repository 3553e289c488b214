"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_train_example_runs():
    namespace: dict = {}
    exec(compile(BLOCKS[0], "README.md", "exec"), namespace)
    assert namespace["model"].strategy_ in ("factorized", "materialized")


def test_wide_categorical_example_runs():
    (block,) = [b for b in BLOCKS if "make_hamlet_schema" in b]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    model = namespace["model"]
    assert model.solver_ == "cg" and len(model.coef_) == namespace["yelp"].onehot_width == 11_280
    assert namespace["clf"].training_metrics_["accuracy"] > 0.7


def test_normalized_matrix_example_runs():
    (block,) = [b for b in BLOCKS if "X.crossprod()" in b]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    X, y, T = namespace["X"], namespace["y"], namespace["X"].materialize()
    assert X.shape == (279_017, 4) == T.shape and len(y) == X.shape[0]  # the shape its comment shows
    np.testing.assert_allclose(X.crossprod(), T.T @ T, rtol=1e-9)


def test_sql_example_runs(capsys):
    import ilargi_db
    from ilargi_db.cli import run_sql
    from ilargi_db.datasets import load_nycflights13

    (block,) = re.findall(r"```sql\n(.*?)```", README.read_text(), re.S)
    con = ilargi_db.connect()
    load_nycflights13(con)
    run_sql(con, block)
    out = capsys.readouterr().out
    assert "delay_predict" in out and '"dropped": "delay"' in out
    con.close()
