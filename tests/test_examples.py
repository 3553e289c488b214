"""Every example runs: the Python scripts, the .sql session (through ``ilargi sql -f``) and the notebooks."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from ilargi_db import cli
from tests import notebooks

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_script(name: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, cwd=EXAMPLES.parent
    )
    assert done.returncode == 0, done.stderr
    assert "leaked" not in done.stderr  # connections with UDFs are closed before exit
    assert "%|" not in done.stderr  # no progress bar where stderr is not a terminal
    assert not converging_badly(done.stdout + done.stderr)  # the examples' jobs converge with what they pass
    return done.stdout


def converging_badly(text: str) -> list[str]:
    """The lines of ``text`` telling of a fit stopped at max_iter: a ConvergenceWarning, or the warning of a SQL
    training's summary (the same words)."""
    return [line for line in text.splitlines() if "ConvergenceWarning" in line or "before converging" in line]


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
    assert not converging_badly(out)


def executed_notebook(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The notebook ``name`` run in ``tmp_path`` (its working directory) as Jupyter runs it: each cell shows what
    the notebook committed shows (text, a table, a plot; not the same values), and nothing is left in the
    temporary directory."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))  # the kernel's temporary directory
    notebook = notebooks.execute(name, tmp_path)
    committed = nbformat.read(EXAMPLES / name, as_version=4)
    assert notebooks.shown(notebook) == notebooks.shown(committed), f"run `python -m tests.notebooks {name}`"
    assert sorted(p.name for p in temporary.iterdir()) == []
    shown = [
        o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
        for c in notebook.cells
        for o in c.get("outputs", [])
    ]
    assert not converging_badly("\n".join(shown))  # every training of the notebook converges
    return notebook


def execute_notebook(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list:
    """The outputs of :func:`executed_notebook`."""
    notebook = executed_notebook(name, tmp_path, monkeypatch)
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]


@pytest.mark.parametrize("name", notebooks.NOTEBOOKS)
def test_notebook_is_committed_with_its_outputs(name):
    """Browsing the repository shows what each cell printed and drew: every code cell ran, in order, and the
    outputs hold no error, nothing of the machine that ran them (paths, memory addresses), no bulk."""
    nbformat = pytest.importorskip("nbformat")
    path = EXAMPLES / name
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    outputs = [o for cell in code for o in cell.outputs]
    assert outputs and not [o for o in outputs if o.output_type == "error"]
    text = nbformat.writes(notebook)
    machine = re.compile(r"0x[0-9a-f]{6,}|/tmp/|/home/|/Users/|" + re.escape(str(EXAMPLES.parent)))
    assert not machine.findall(text)
    assert path.stat().st_size < 400_000  # a few small plots and tables
    assert notebook == notebooks.tidy(nbformat.read(path, as_version=4))  # as `python -m tests.notebooks` writes


def test_notebook_shows_progress(tmp_path, monkeypatch):
    """In Jupyter, a training shows its progress bar in the cell (tqdm's text bar without ipywidgets); the bar
    clears itself, so the cell keeps no trace of it."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    monkeypatch.setenv("TQDM_DELAY", "0")  # bars of short steps too (in a notebook, only steps of 1 s show one)
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "import ilargi_db\n"
            "con = ilargi_db.connect()\n"
            "con.execute('CREATE TABLE t AS SELECT range AS x, range % 7 AS y FROM range(100)')\n"
            "model = ilargi_db.train(con, 'SELECT x, y FROM t', target='y')"
        )
    ]
    (cell,) = notebooks.run(notebook, tmp_path).cells
    stderr = "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stderr")
    assert "planning: " in stderr and "%|" in stderr  # the bar over the training's stages
    assert notebooks.tidy(notebook).cells[0].outputs == []


def test_notebook_executes(tmp_path, monkeypatch):
    outputs = execute_notebook("flights_sql.ipynb", tmp_path, monkeypatch)
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the plot


def test_retail_files_notebook_executes(tmp_path, monkeypatch):
    """From the package's retail files to a plot and a Parquet file of scores, one per unlabelled sale."""
    outputs = execute_notebook("retail_files.ipynb", tmp_path, monkeypatch)
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
    """An iterating session on a database file: the job after the alpha change reuses, the chart is a PNG, and
    the temporary directory of the database goes at the end."""
    notebook = executed_notebook("iterating_with_reuse.ipynb", tmp_path, monkeypatch)
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
    assert "the temporary directory is gone: True" in text["clear"]
    (chart,) = [cell for cell in notebook.cells if cell.id == "chart"]
    assert any("image/png" in o.get("data", {}) for o in chart.outputs)  # the chart, inline
