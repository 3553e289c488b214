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


def test_reuse_example_runs():
    (block,) = [b for b in BLOCKS if "clear_artifacts" in b]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    again = namespace["again"]
    assert any("the encoded matrix (matrix, from memory" in line for line in again.reused_)  # as its comment shows
    ilargi_db, con, wider = namespace["ilargi_db"], namespace["con"], namespace["wider"]
    ilargi_db.train(con, namespace["query"], target="arr_delay", strategy="factorized")
    used = ilargi_db.train(con, wider, target="arr_delay", strategy="factorized").reused_
    assert sum("(column, from memory" in line for line in used) == 5 and any("key-only join" in line for line in used)
    assert ilargi_db.explain(con, wider, target="arr_delay").reasons[-1].startswith("reuses ")
    ilargi_db.clear_artifacts(con)
    assert namespace["ilargi_db"].artifacts(namespace["con"]) == []  # cleared


def test_sql_example_runs(capsys):
    import ilargi_db
    from ilargi_db.datasets import load_nycflights13
    from ilargi_db.shell import Session

    (block,) = [b for b in re.findall(r"```sql\n(.*?)```", README.read_text(), re.S) if "delay_predict" in b]
    con = ilargi_db.connect()
    load_nycflights13(con)
    Session(con, ilargi_db.connect).run_sql(block)
    out = capsys.readouterr().out
    assert "delay_predict" in out and "│ dropped           │ delay: 1 version and its macros │" in out
    con.close()


def test_sql_trees_example_runs(capsys):
    import ilargi_db
    from ilargi_db.datasets import load_nycflights13
    from ilargi_db.shell import Session

    (block,) = [b for b in re.findall(r"```sql\n(.*?)```", README.read_text(), re.S) if "gradient_boosting" in b]
    con = ilargi_db.connect()
    load_nycflights13(con)
    Session(con, ilargi_db.connect, mode="csv").run_sql(block)
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["objective", "log_loss"]  # as its comment shows
    assert out[2] == "flight,carrier,p_late,late" and [row.split(",")[0] for row in out[3:]] == ["1"] * 3
    con.close()


SHOWN = re.findall(r"```text\n(.*?)```", README.read_text(), re.S)
# What may differ from machine to machine in a shown output: timings, ratios of timings, the throughput
# measured, and so the strategy those favour. Everything else (counts, shapes, ratios of the data) must match.
MACHINE_DEPENDENT = re.compile(
    r"(?<![\w.,])\d[\d,]*(\.\d+)?(?=( ?(s|ms|x faster|x better|GB/s|GFLOP/s|cores)\b))|factorized|materialized"
)


def logical_lines(text: str) -> list[str]:
    """The README wraps long lines, continuing them indented by four spaces (not a "  - " bullet)."""
    lines: list[str] = []
    for line in text.splitlines():
        if lines and line.startswith("    ") and not line.lstrip().startswith("- "):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines


def shown_pattern(line: str) -> re.Pattern:
    literal = [re.escape(p) for p in MACHINE_DEPENDENT.sub("\0", line).split("\0")]
    return re.compile(r"[\w.,]+".join(literal) + "$")


def test_shown_cli_session_gives_the_output_shown(tmp_path, monkeypatch, capsys):
    """Each ``$ ilargi ...`` command of the README's text blocks runs; its output matches the shown lines."""
    import shlex

    from ilargi_db import cli

    monkeypatch.chdir(tmp_path)
    for block in SHOWN:
        sessions = re.split(r"^\$ ", "\n".join(logical_lines(block)), flags=re.M)[1:]
        for session in sessions:
            command, _, shown = session.partition("\n")
            argv = shlex.split(command.replace("> /dev/null", ""))
            assert argv[0] == "ilargi"
            capsys.readouterr()
            assert cli.main(argv[1:]) == 0, command
            actual = capsys.readouterr().out.splitlines()
            for line in shown.splitlines():
                if not line.strip() or line.strip().startswith("..."):  # "..." elides lines (and may say what)
                    continue
                pattern = shown_pattern(line)
                assert any(pattern.match(a) for a in actual), f"README shows\n{line}\nbut `{command}` printed\n" + (
                    "\n".join(actual)
                )
