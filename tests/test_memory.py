"""Normalizing never allocates anything near the size of the join it avoids."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

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
