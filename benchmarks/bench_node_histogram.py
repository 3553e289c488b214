"""A node's histogram on the star's shape: the dimensions' features summed per source row first (factorized) or
gathered into the fact's rows (row-wise, what the whole-tree grower reads), on one thread.

Issue 35's item 3 asks for the factorized histogram where it pays, per node. This measures where that is. The
matrix has ``make_tree_star``'s shape: a fact of ``--rows`` rows with 4 features of its own and keys into
customers (a row per 20 fact rows, 3 features), products (a row per 100, 3 features, skewed keys) and stores (a
row per 2,000, 2 features); bins drawn at random (the kernels' cost does not depend on the values). Each node is
a random ``share`` of the fact's rows, in order (as a node's rows are). Three ways, one kernel
(``node_histogram``) and the same rows:

- ``row-wise``: every dimension's bins gathered into the fact's block first (one byte per row and feature);
- ``through the keys``: each dimension's bins read through the row's key;
- ``factorized``: (g, h, 1) summed per dimension row over the node's rows, then per bin over the dimension.

Each is run once untimed, then the best of 5 is kept.

    python benchmarks/bench_node_histogram.py --output docs/benchmarks.md     # about 30 seconds
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.report import publish, ran  # noqa: E402

from ilargi_db.backend import get_backend  # noqa: E402
from ilargi_db.backend.parallel import kernel_threads  # noqa: E402
from ilargi_db.linalg.binned_matrix import BinnedBlock, BinnedMatrix, FlatBins  # noqa: E402
from ilargi_db.linalg.feature_bins import FeatureBins  # noqa: E402

# (fact rows per dimension row, features, key skew): the shape make_tree_star writes.
DIMENSIONS = {"customers": (20, 3, 1.0), "products": (100, 3, 1.5), "stores": (2_000, 2, 1.0)}
FACT_FEATURES = 4
SHARES = (1.0, 0.5, 0.25, 0.1, 0.03)
MISSING_BIN = 255


def star_matrix(rows: int, seed: int = 0) -> BinnedMatrix:
    """A fact block and a block per dimension, read through keys (the factorized read's matrix)."""
    rng = np.random.default_rng(seed)
    fact = rng.integers(0, 255, (rows, FACT_FEATURES), dtype=np.uint8)
    blocks = [BinnedBlock(fact, None, np.arange(FACT_FEATURES), np.zeros(FACT_FEATURES, dtype=np.uint8))]
    column = FACT_FEATURES
    for per, width, skew in DIMENSIONS.values():
        n = max(rows // per, 1)
        keys = np.floor(n * rng.random(rows) ** skew).astype(np.int64)
        codes = rng.integers(0, 255, (n, width), dtype=np.uint8)
        blocks.append(BinnedBlock(codes, keys, np.arange(column, column + width), np.zeros(width, dtype=np.uint8)))
        column += width
    bins = [FeatureBins(f"x{j}", False, np.arange(254, dtype=float)) for j in range(column)]
    return BinnedMatrix(blocks, rows, bins, MISSING_BIN)


def best_ms(call, repeats: int = 5) -> float:
    call()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return 1000 * min(times)


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__, rows=1_000_000).parse_args(argv)
    started = time.perf_counter()
    X = star_matrix(args.rows)
    kernels = get_backend("numpy").tree_kernels
    gathered, keyed = FlatBins.of(X), FlatBins.of(X, gather_width=0)
    dimensions = np.array([False, True, True, True])
    rng = np.random.default_rng(1)
    g, h = rng.standard_normal(args.rows), np.ones(args.rows)
    lines = [
        "| node rows | row-wise ms | through the keys ms | factorized ms | row-wise / factorized |",
        "|---:|---:|---:|---:|---:|",
    ]
    with kernel_threads(1):
        for share in SHARES:
            rows = np.sort(rng.choice(args.rows, int(share * args.rows), replace=False)).astype(np.int64)
            ms = [
                best_ms(lambda f=flat, s=segment, r=rows: kernels.node_histogram(f, r, g, h, s, True))
                for flat, segment in (
                    (gathered, np.array([False])),
                    (keyed, np.zeros(4, dtype=np.bool_)),
                    (keyed, dimensions),
                )
            ]
            row = f"| {len(rows):,} | {ms[0]:.1f} | {ms[1]:.1f} | {ms[2]:.1f} | {ms[0] / ms[2]:.2f}x |"
            print(row, flush=True)
            lines.append(row)
    publish(
        [
            "## A node's histogram on the star's shape, factorized or gathered (`benchmarks/bench_node_histogram.py`)",
            "",
            f"{ran(command(__file__, argv), time.perf_counter() - started)}. One thread; {args.rows:,} fact rows, "
            "4 fact features, 3 dimensions of 8 features (50k, 10k and 500 rows at 1M); best of 5. Above 1.00x "
            "the factorized histogram is the faster.",
            "",
            *lines,
        ],
        args.output,
        "bench_node_histogram",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
