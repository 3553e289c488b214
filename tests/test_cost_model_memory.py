"""Normalizing never allocates anything near the size of the join it avoids."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import ilargi_db
from ilargi_db import IlargiError

SCRIPT = textwrap.dedent(
    """
    import json, resource
    import ilargi_db
    from ilargi_db.datasets import make_star_schema

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    def hwm():
        # VmHWM belongs to this process image; ru_maxrss starts at the forking parent's RSS (pytest's).
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) * 1024

    con = ilargi_db.connect()
    schema = make_star_schema(con, fact_rows=400_000, fact_features=2, n_dims=4, dim_rows=2_000, dim_features=25)
    inputs = (400_000 * (2 + 4 + 1) + 4 * 2_000 * 26) * 8
    join = 400_000 * (2 + 4 * 25) * 8
    ilargi_db.normalize(con, "SELECT f.x0 FROM fact AS f WHERE f.x0 < 0.001", backend="numpy")  # warm imports
    before = rss()
    X, y = ilargi_db.normalize(con, schema.query(), target="y", backend="numpy")
    peak = hwm()
    print(json.dumps({"inputs": inputs, "join": join, "extra": peak - before}))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_peak_memory_stays_far_below_the_join():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    sizes = json.loads(out.stdout.strip().splitlines()[-1])
    assert sizes["join"] >= 10 * sizes["inputs"]
    # Peak RSS is a high-water mark of the whole process, so this over-counts: still far below the join.
    assert sizes["extra"] < sizes["join"] / 4, sizes


def _fan_out_join(con, fact_rows: int, keys: int) -> str:
    """A fact of ``fact_rows`` and 2 features joined M:N with 2,000 rows of 20 features on ``keys`` keys."""
    con.sql(
        f"CREATE TABLE fact AS SELECT range % {keys} AS k, random() AS x1, random() AS x2, random() AS y "
        f"FROM range({fact_rows})"
    )
    con.sql(
        f"CREATE TABLE dim AS SELECT range % {keys} AS k, "
        + ", ".join(f"random() AS z{j}" for j in range(20))
        + " FROM range(2000)"
    )
    dims = ", ".join(f"d.z{j}" for j in range(20))
    return f"SELECT f.x1, f.x2, {dims}, f.y FROM fact f JOIN dim d USING (k)"


def test_a_job_beyond_duckdbs_memory_limit_trains_the_strategy_that_fits():
    con = ilargi_db.connect()
    query = _fan_out_join(con, 20_000, 100)  # 400,000 joined rows
    con.sql("SET memory_limit = '40MB'")
    with pytest.raises(IlargiError) as err:
        ilargi_db.train(con, query, target="y", strategy="materialized", backend="numpy")
    assert str(err.value).startswith(
        "training materialized needs at least 70.2 MiB of arrays, more than DuckDB's memory_limit of 38.1 MiB. "
        "These NumPy arrays live outside DuckDB's buffer manager"
    )
    assert "train factorized (it needs about 9.8 MiB)" in str(err.value)
    explanation = ilargi_db.explain(con, query, target="y", backend="numpy")
    assert explanation.strategy == "factorized"
    assert (
        explanation.features["array_bytes_materialized"] > 38 * 2**20 > explanation.features["array_bytes_factorized"]
    )


def test_a_job_no_strategy_can_hold_is_refused_before_any_data_is_read():
    con = ilargi_db.connect()
    query = _fan_out_join(con, 20_000, 10)  # 4,000,000 joined rows: the indicators alone take 61 MiB
    con.sql("SET memory_limit = '50MB'")
    for call in (
        lambda: ilargi_db.normalize(con, query, target="y", backend="numpy"),
        lambda: ilargi_db.train(con, query, target="y", backend="numpy"),
    ):
        with pytest.raises(IlargiError, match=r"training factorized needs at least 9\d\.\d MiB of arrays, .*: raise"):
            call()


def test_array_bytes_count_the_rows_a_filtered_source_keeps():
    from ilargi_db.cost_model import JobStats, SourceStats
    from ilargi_db.cost_model.memory import array_bytes

    # WHERE keeps 1,000 of a million fact rows: the fact's block holds those, not the table.
    fact = SourceStats(
        "f", rows=1_000_000, referenced=1_000, filled=1_000, width=3, categorical_width=1, categorical_features=1
    )
    dim = SourceStats("d", rows=50, referenced=40, filled=1_000, width=4, categorical_width=0)
    sizes = array_bytes(JobStats(1_000, (fact, dim), "f", cross_width=0, numeric_zero_share=0.0))
    target = 1_000 * 8
    assert sizes["factorized"] == target + 1_000 * (2 * 8 + 12) + 40 * 4 * 8 + 2 * 1_000 * 8
    assert sizes["materialized"] == target + 1_000 * ((2 * 8 + 12) + 4 * 8)


def test_a_stream_holds_the_other_sources_whole_and_sizes_partition_rows_from_the_streamed_one():
    from ilargi_db.cost_model import JobStats, SourceStats
    from ilargi_db.cost_model.memory import array_bytes, partition_row_bytes, resident_bytes

    fact = SourceStats(
        "f", rows=1_000_000, referenced=1_000, filled=1_000, width=3, categorical_width=1, categorical_features=1
    )
    dim = SourceStats("d", rows=50, referenced=40, filled=1_000, width=4, categorical_width=0)
    stats = JobStats(1_000, (fact, dim), "f", cross_width=0, numeric_zero_share=0.0)
    # The dimension's rows the join uses, counted as array_bytes counts its block.
    assert resident_bytes(stats, "f") == 40 * 4 * 8
    assert (
        resident_bytes(stats, "f") + 1_000 * (2 * 8 + 12) + 2 * 1_000 * 8 + 1_000 * 8
        == array_bytes(stats)["factorized"]
    )
    # A streamed row: 2 numbers and 1 code with their Arrow copy, an index into the dimension, the target.
    assert partition_row_bytes(stats, "f") == 2 * (2 * 8 + 8 + 8) + 8
