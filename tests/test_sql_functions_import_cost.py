"""A new process pays for what it uses: ``import ilargi_db`` and ``ilargi_db.connect()`` load DuckDB (and NumPy), not
the training stack; the first SQL function call loads it then (issue 37)."""

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
    assert "sklearn" in loaded_after(code)  # the implementations load with the first call, and run
