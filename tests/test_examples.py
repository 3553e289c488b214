"""Every example runs: the Python scripts, the .sql session (through ``ilargi sql -f``) and the notebook."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ilargi_db import cli

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_script(name: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, cwd=EXAMPLES.parent
    )
    assert done.returncode == 0, done.stderr
    assert "leaked" not in done.stderr  # connections with UDFs are closed before exit
    return done.stdout


def test_star_schema_example():
    out = run_script("star_schema.py", "--rows", "50000", "--dim-rows", "2500")
    assert "factorized" in out


def test_train_flights_example():
    out = run_script("train_flights.py")
    assert "kmeans" in out.lower() or "k-means" in out.lower()


def test_sql_from_python_example():
    out = run_script("sql_from_python.py")
    assert "trained late v1" in out and "p_late" in out


def test_sql_session_example(tmp_path, capsys):
    assert cli.main(["sql", str(tmp_path / "retail.duckdb"), "-f", str(EXAMPLES / "retail.sql")]) == 0
    out = capsys.readouterr().out
    assert "units_model" in out and "predicted" in out


def test_notebook_executes(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(EXAMPLES / "flights_sql.ipynb", as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the plot
