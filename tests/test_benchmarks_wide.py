"""benchmarks/bench_wide.py's pieces on tiny data: both methods train, agree, and the report renders.

No timing assertions: the benchmark's numbers belong to docs/benchmarks.md, not to the test suite.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import duckdb
import pytest

import ilargi_db
from ilargi_db.datasets import make_hamlet_schema

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location("bench_wide", BENCHMARKS / "bench_wide.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("wide") / "wide.duckdb")
    con = ilargi_db.connect(db)
    schema = make_hamlet_schema(con, "walmart", scale=0.005)
    con.close()
    return db, schema


def test_both_methods_agree_on_tiny_data(bench, data):
    db, schema = data
    results = []
    for algorithm in bench.ALGORITHMS:
        job = bench.make_job(schema, algorithm, clusters=3, components=2, iterations=10)
        con = ilargi_db.connect(db)
        ilargi = bench.run_ilargi(con, job)
        con.close()
        with duckdb.connect(db, read_only=True) as con:
            baseline = bench.run_baseline(con, job)
        ilargi["peak"] = baseline["peak"] = 1
        assert ilargi["features"] == baseline["features"] == schema.onehot_width
        assessment = bench.assess(algorithm, ilargi, baseline)
        if algorithm in ("linear_regression", "logistic_regression"):
            assert abs(assessment["quality"]) < 1e-3
        if algorithm == "gnmf":  # the same start and the same updates
            assert assessment["quality"] == pytest.approx(1.0, rel=1e-6)
        results.append(
            {"shape": "walmart", "rows": schema.fact_rows, "width": schema.onehot_width, "algorithm": algorithm}
            | {"ilargi": ilargi, "baseline": baseline, "assessment": assessment}
        )
    setup = {
        "command": "python benchmarks/bench_wide.py --quick",
        "seconds": 1.0,
        "date": "today",
        "generate_seconds": 0.1,
        "facts": {"cpus": 2, "usable_cpus": 2, "platform": "test", "python": "3", "numpy": "2", "blas_runtime": "?"}
        | {"duckdb": "2", "duckdb_threads": 2, "ilargi_db": "0", "git": "abc"},
        "sklearn": "1",
        "others": 0.0,
        "load": (0.0, 0.0),
        "timeout": 600,
        "memory_limit": 12,
        "linear_note": "",
        "clusters": 3,
        "components": 2,
        "iterations": 10,
    }
    text = bench.render(results, setup)
    assert text.count("| walmart |") == 2 * len(bench.ALGORITHMS)  # the results and the time split


def test_failures_are_reported_not_raised(bench, data):
    db, schema = data
    job = bench.make_job(schema, "kmeans")
    assert bench.run(db, "ilargi", job, {}, timeout=0.01, memory_limit=0)["error"].startswith("timeout")
    failed = bench.assess("linear_regression", {"error": "MemoryError"}, {"seconds": 1.0, "peak": 1, "quality": 0.5})
    assert failed["speedup"] is None and set(failed["targets"].values()) == {"missed"}
    error = Exception("MemoryError: Unable to allocate 23.0 GiB for an array with shape (55606, 55606) and data type")
    assert bench.describe_error(error) == "MemoryError: 23.0 GiB for a (55606, 55606) array"


def test_scale_option(bench):
    assert bench.parse_scale("0.5", ["walmart", "yelp"], {}) == {"walmart": 0.5, "yelp": 0.5}
    assert bench.parse_scale("yelp=0.2", ["walmart", "yelp"], {"walmart": 1.0}) == {"walmart": 1.0, "yelp": 0.2}
