"""Every example runs: the Python scripts, the .sql session (through ``ilargi sql -f``) and the notebooks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
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
    # X^T X and column sums are memoized per matrix: timing a repeat would time a copy (thousands of times
    # "faster" than the materialized product). Each repeat must time the work.
    for operation in ("X.T @ X (crossprod)", "colsums"):
        (line,) = [line for line in out.splitlines() if line.startswith(operation)]
        assert float(line.split()[-2].rstrip("x")) < 500, line


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


def execute_notebook(name: str, directory: Path) -> list:
    """Run the notebook ``name`` in ``directory`` (its working directory); its outputs, with no error among them."""
    notebook = executed_notebook(name, directory)
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]


def executed_notebook(name: str, directory: Path):
    """The notebook ``name`` run in ``directory`` (its working directory), with no error among its outputs."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(EXAMPLES / name, as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": directory}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    return notebook


def test_notebook_executes(tmp_path):
    outputs = execute_notebook("flights_sql.ipynb", tmp_path)
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the plot


def test_retail_files_notebook_executes(tmp_path):
    """From the package's retail files to a plot and a Parquet file of scores, one per unlabelled sale."""
    outputs = execute_notebook("retail_files.ipynb", tmp_path)
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the plot
    data = tmp_path / "retail_data"
    assert (data / "scores.parquet").exists() and (data / "retail.duckdb").exists()
    con = duckdb.connect()
    scored, distinct, predicted, probabilities, unlabelled = con.sql(
        f"SELECT count(*), count(DISTINCT sale_id), count(predicted_units), "
        f"count(*) FILTER (WHERE p_big_basket BETWEEN 0 AND 1), "
        f"(SELECT count(*) FROM read_parquet('{(data / 'sales.parquet').as_posix()}') WHERE units IS NULL) "
        f"FROM read_parquet('{(data / 'scores.parquet').as_posix()}')"
    ).fetchall()[0]
    assert scored == distinct == predicted == probabilities == unlabelled > 0
    missing = con.sql(
        f"SELECT count(*) FROM read_parquet('{(data / 'sales.parquet').as_posix()}') s "
        f"ANTI JOIN read_parquet('{(data / 'scores.parquet').as_posix()}') USING (sale_id) WHERE s.units IS NULL"
    ).fetchall()
    assert missing == [(0,)]  # every unlabelled sale is scored


def test_iterating_with_reuse_notebook_executes(tmp_path, monkeypatch):
    """An iterating session on a database file: the job after the alpha change reuses, the chart is a PNG."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebook's temporary directory, inside tmp_path
    notebook = executed_notebook("iterating_with_reuse.ipynb", tmp_path)
    text = {  # each code cell's printed text, by the cell's id
        cell.id: "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        for cell in notebook.cells
        if cell.cell_type == "code"
    }
    assert "reused:" in text["another-alpha"] and "reused: nothing" not in text["another-alpha"]
    assert "\nreuses " in text["explain"]  # explain says what the store holds for the job
    assert "from database" in text["next-day"]  # a new process's job loads the artifacts the file stores
    assert "seats reused: False" in text["table-change"]  # never stale
    assert "same coefficients as a cold run: True True" in text["table-change"]
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the chart, inline
    (chart,) = tmp_path.glob("ilargi_reuse_*/reuse_seconds.png")
    assert chart.read_bytes().startswith(b"\x89PNG")
