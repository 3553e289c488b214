"""Boosting time per tree on the same bins: ilargi_db's grower against LightGBM, on 1 and 2 threads.

Issue 35's per-tree target: on the materialized join's bins (no factorized advantage, no binning, no export),
100 trees of 63 leaves, depth 6, 20 rows per leaf, no L2, take no longer per tree than LightGBM's on the same
rows with the same thread count. The rows are ``make_tree_star``'s join (12 features, 5 VARCHAR), each
column's bins computed once here (numbers at their quantiles, text as its categories) and handed to both:
ilargi_db as a binned matrix, LightGBM as the bin codes with its ``Dataset`` built before the clock starts
(the text columns categorical). Sides run one after another in this one process, each fitted twice and the
second fit timed (the first loads the compiled kernels); ``quantized``: ilargi_db's ``quantized_gradients``
and LightGBM's ``use_quantized_grad``.

    python benchmarks/bench_per_tree.py --output docs/benchmarks.md     # about 2 minutes
    python benchmarks/bench_per_tree.py --busy                          # beside one busy competing process
    python benchmarks/bench_per_tree.py --rows 100000                   # a smoke run
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.report import publish, ran  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.backend.parallel import kernel_threads  # noqa: E402
from ilargi_db.datasets import make_tree_star  # noqa: E402
from ilargi_db.linalg.binned_matrix import BinnedBlock, BinnedMatrix  # noqa: E402
from ilargi_db.linalg.feature_bins import FeatureBins, bin_dtype  # noqa: E402
from ilargi_db.models import GradientBoosting  # noqa: E402

TREES = 100
ILARGI = dict(n_estimators=TREES, learning_rate=0.1, max_depth=6, max_leaves=63, min_samples_leaf=20, random_state=0)
LIGHTGBM = dict(
    num_leaves=63, max_depth=6, min_data_in_leaf=20, learning_rate=0.1, lambda_l2=0.0, max_bin=255,
    min_sum_hessian_in_leaf=1e-3, verbose=-1, seed=0,
)  # fmt: skip
OBJECTIVES = {"y": ("squared_error", "regression"), "label": ("log_loss", "binary")}


def binned_join(rows: int) -> tuple[np.ndarray, list[FeatureBins], int, dict[str, np.ndarray], list[int]]:
    """The star's join as bin codes: (codes, bins, missing bin, targets, categorical columns)."""
    con = ilargi_db.connect()
    star = make_tree_star(con, fact_rows=rows)
    table = con.sql(star.query("y")).to_arrow_table()
    labels = con.sql(star.query("label")).to_arrow_table().column("label").to_numpy()
    names = [n for n in table.column_names if n != "y"]
    columns, bins, categorical = [], [], []
    for j, name in enumerate(names):
        values = table.column(name)
        if values.type == "string":
            categories = tuple(sorted(set(values.drop_null().to_pylist())))
            bins.append(FeatureBins(name, True, categories=categories))
            categorical.append(j)
            columns.append(values)
        else:
            numbers = values.to_numpy(zero_copy_only=False).astype(float)
            edges = np.unique(np.nanquantile(numbers, np.linspace(0, 1, 256)[1:-1]))
            bins.append(FeatureBins(name, False, edges))
            columns.append(numbers)
    missing_bin = max(255, max(b.n_bins for b in bins))
    codes = np.column_stack([b.codes(c, missing_bin) for b, c in zip(bins, columns)]).astype(bin_dtype(missing_bin))
    targets = {"y": table.column("y").to_numpy().astype(float), "label": labels.astype(float)}
    return codes, bins, missing_bin, targets, categorical


def ilargi_seconds(X: BinnedMatrix, y: np.ndarray, objective: str, threads: int | None, quantized: bool) -> float:
    """``threads`` None: as ilargi_db runs by default, on the cores free at each pass."""
    model = GradientBoosting(objective=objective, quantized_gradients=quantized, **ILARGI)
    with kernel_threads(threads) if threads else contextlib.nullcontext():
        model.fit(X, y)  # loads the compiled kernels
        began = time.perf_counter()
        model.fit(X, y)
        return time.perf_counter() - began


def lightgbm_seconds(dataset, objective: str, threads: int | None, quantized: bool) -> float:
    """``threads`` None: LightGBM's default (OpenMP's, a thread per core)."""
    import lightgbm

    params = dict(LIGHTGBM, objective=objective, use_quantized_grad=quantized)
    if threads:
        params["num_threads"] = threads
    lightgbm.train(params, dataset, TREES)
    began = time.perf_counter()
    lightgbm.train(params, dataset, TREES)
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    found = parser(__doc__, rows=1_000_000)
    found.add_argument("--busy", action="store_true", help="time beside one process spinning on a core")
    args = found.parse_args(argv)
    started = time.perf_counter()
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        return measure(args, argv, started)
    finally:
        if burner is not None:
            burner.kill()


def measure(args, argv: list[str] | None, started: float) -> int:
    import lightgbm

    codes, bins, missing_bin, targets, categorical = binned_join(args.rows)
    X = BinnedMatrix([BinnedBlock(codes, None, np.arange(len(bins)), codes[0] * 0)], len(codes), bins, missing_bin)
    lines = [
        "| task | threads | ilargi ms/tree | quantized | LightGBM ms/tree | quantized | LightGBM / ilargi "
        "| quantized |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for target, (ours, theirs) in OBJECTIVES.items():
        y = targets[target]
        dataset = lightgbm.Dataset(
            codes.astype(np.float64), y, categorical_feature=categorical, params={"max_bin": 255, "verbose": -1}
        ).construct()
        for threads in (None,) if args.busy else (1, 2):
            ms = {}
            for quantized in (False, True):
                ms["ilargi", quantized] = 1000 * ilargi_seconds(X, y, ours, threads, quantized) / TREES
                ms["lightgbm", quantized] = 1000 * lightgbm_seconds(dataset, theirs, threads, quantized) / TREES
            ratios = [ms["lightgbm", q] / ms["ilargi", q] for q in (False, True)]
            row = (
                f"| {theirs} | {threads or 'default'} | {ms['ilargi', False]:.1f} | {ms['ilargi', True]:.1f} | "
                f"{ms['lightgbm', False]:.1f} | {ms['lightgbm', True]:.1f} | {ratios[0]:.2f}x | {ratios[1]:.2f}x |"
            )
            print(row, flush=True)
            lines.append(row)
    how = ran(command(__file__, argv), time.perf_counter() - started)
    publish(
        [
            "## Boosting time per tree on the same bins (`benchmarks/bench_per_tree.py`)"
            + (", beside a busy process" if args.busy else ""),
            "",
            f"{how}. `make_tree_star`'s join, {args.rows:,} rows, binned once; 100 trees of 63 leaves, depth 6; "
            "the second fit of each side timed. Above 1.00x ilargi_db is faster per tree.",
            "",
            *lines,
        ],
        args.output,
        "bench_per_tree_busy" if args.busy else "bench_per_tree",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
