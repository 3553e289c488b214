"""The fixed cost of one operator call on a small normalized matrix: dispatch, thread hand-off, the kernel's entry.

Issue 37's fourth target: at most 50 us a call, single-threaded below the size where threads pay. Each operator
(``X @ w``, ``X.T @ v``, ``X @ W`` of 8 columns) runs in a block of calls on normalized matrices of a fact of n rows
(one column) and a dimension of n / 10 rows (5 columns, sparse one-hot style), from 100 to 100,000 rows; the
median of a few blocks, in microseconds a call, beside NumPy's product on the materialized matrix (what the call
would cost without the factorized layout's dispatch).

    python benchmarks/bench_call_overhead.py --output docs/benchmarks.md     # about 20 seconds
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.machine import OtherProcesses  # noqa: E402
from harness.report import publish, ran  # noqa: E402

from ilargi_db import Block, NormalizedMatrix  # noqa: E402

ROWS = (100, 1_000, 10_000, 100_000)
WIDTH = 8  # columns of W in X @ W


def matrices(n: int) -> tuple[NormalizedMatrix, np.ndarray]:
    """A fact of ``n`` rows x 1 and a dimension of n / 10 rows x 5, factorized and materialized."""
    rng = np.random.default_rng(0)
    rows = max(n // 10, 2)
    fact, dimension = rng.standard_normal((n, 1)), rng.standard_normal((rows, 5))
    keys = rng.integers(0, rows, n)
    X = NormalizedMatrix(
        [Block(fact, columns=range(1)), Block(dimension, columns=range(1, 6), index=keys)], n_rows=n, backend="numpy"
    )
    return X, np.hstack([fact, dimension[keys]])


def per_call(call: Callable[[], object], seconds: float = 0.2, blocks: int = 5) -> float:
    """Median microseconds of one call over ``blocks`` blocks of calls, each about ``seconds`` long."""
    call()
    began, calls = time.perf_counter(), 0
    while time.perf_counter() - began < seconds / 4:
        call()
        calls += 1
    size = max(int(calls * 4 / blocks), 10)
    found = []
    for _ in range(blocks):
        began = time.perf_counter()
        for _ in range(size):
            call()
        found.append((time.perf_counter() - began) / size * 1e6)
    return statistics.median(found)


def timed_rows(n: int) -> list[str]:
    """The table's rows for a fact of ``n`` rows: each operator, factorized and on the materialized matrix."""
    X, T = matrices(n)
    rng = np.random.default_rng(1)
    w, v, W = rng.standard_normal(6), rng.standard_normal(n), rng.standard_normal((6, WIDTH))
    np.testing.assert_allclose(X @ w, T @ w, rtol=1e-10)
    np.testing.assert_allclose(X.T @ v, T.T @ v, rtol=1e-10)
    cases = {
        "`X @ w`": (lambda: X @ w, lambda: T @ w),
        "`X.T @ v`": (lambda: X.T @ v, lambda: T.T @ v),
        f"`X @ W` ({WIDTH} columns)": (lambda: X @ W, lambda: T @ W),
    }
    return [f"| {n:,} | {name} | {per_call(a):.1f} | {per_call(b):.1f} |" for name, (a, b) in cases.items()]


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__).parse_args(argv)
    started, others = time.perf_counter(), OtherProcesses()
    rows = [row for n in ROWS for row in timed_rows(n)]
    publish(
        [
            "## The fixed cost of an operator call (`benchmarks/bench_call_overhead.py`)",
            "",
            f"{ran(command(__file__, argv), time.perf_counter() - started)}. A fact of n rows x 1 and a dimension "
            "of n / 10 rows x 5; the median microseconds a call of 5 blocks of calls; NumPy's product on the "
            f"materialized n x 6 matrix beside it. Other processes used {others.share():.1%} of the CPU time "
            "meanwhile.",
            "",
            "| fact rows | operator | factorized (us a call) | NumPy on the materialized matrix (us a call) |",
            "|---:|---|---:|---:|",
            *rows,
        ],
        args.output,
        "bench_call_overhead",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
