"""Wide one-hot training stays small: 80,000 one-hot columns train under 2 GiB of peak memory.

Real training sets over joins are 2k-80k columns wide (background.md section 3), mostly the one-hot
dimension keys. Like tests/test_cost_model_memory.py, the work runs in a fresh process that reports its own peak
(VmHWM); an address-space limit turns a runaway allocation into a quick MemoryError instead of
swapping the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

LIMIT_GIB = 2
SCRIPT = textwrap.dedent(
    """
    import json, resource, time
    resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, 8 * 2**30))  # far above the target, far below the machine
    import ilargi_db
    from ilargi_db.datasets import DimensionShape, HamletShape, make_hamlet_schema

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    def hwm():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) * 1024

    con = ilargi_db.connect()
    # 40,000 fact rows, two dimensions of 40,000 keys each, every key used: 80,000 one-hot columns.
    shape = HamletShape("wide", "fact", 40_000, (DimensionShape("a", 40_000), DimensionShape("b", 40_000)))
    schema = make_hamlet_schema(con, shape)
    warm = make_hamlet_schema(con, shape.scaled(0.001), prefix="warm_")
    ilargi_db.train(con, warm.regression_query, target="y", backend="numpy")  # imports, first-call caches
    before = rss()
    start = time.perf_counter()
    try:
        model = ilargi_db.train(con, schema.regression_query, target="y", backend="numpy")
        result = {"width": len(model.coef_), "r2": model.training_metrics_["r2"]}
    except MemoryError as err:
        result = {"error": f"MemoryError: {err}"}
    result.update(peak=hwm() - before, seconds=time.perf_counter() - start, expected_width=schema.onehot_width)
    print(json.dumps(result))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_80000_one_hot_columns_train_under_2_gib():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["expected_width"] == 80_000
    assert "error" not in result, result
    assert result["width"] == 80_000
    assert result["peak"] < LIMIT_GIB * 2**30, result
