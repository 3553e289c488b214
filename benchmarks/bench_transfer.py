"""Host-to-device transfers: uploads through pinned buffers against pageable copies, and a streamed training's
copies overlapping its compute (prefetch on against off), on a device backend.

Issue 26, item 3. Two measurements, both sides timed alternately in one process (medians of ``--repeats``):

- Upload bandwidth: ``backend.to_device(block)`` (one copy into a reused pinned buffer, then an asynchronous
  copy from it) against ``xp.asarray(block)`` (CuPy's copy from pageable memory), each followed by a
  synchronization of the stream, for blocks of several sizes.
- A streamed logistic regression (L-BFGS, ``tol=0``) at a tenth of its data's bytes: the seconds of a later
  pass (one read of every partition from the spill) with prefetch on (partition k+1 built and copied on the
  prefetching thread's copy stream while partition k computes) and off, and in memory.

Needs a CUDA GPU and CuPy for ``--backend cupy`` (the default); ``--backend numpy --quick`` is a smoke run
of the streamed part (NumPy uploads nothing: its upload part is skipped).

    python benchmarks/bench_transfer.py --output docs/benchmarks.md
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import duckdb  # noqa: E402
import numpy as np  # noqa: E402
from harness.cli import command, parser  # noqa: E402
from harness.report import publish, ran  # noqa: E402
from harness.timing import interleaved, later_passes, record_seconds  # noqa: E402
from harness.workloads import star_label  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.backend import get_backend  # noqa: E402
from ilargi_db.datasets import make_star_schema  # noqa: E402
from ilargi_db.linalg import partitions  # noqa: E402
from ilargi_db.models import LogisticRegression  # noqa: E402

UPLOAD_MIB = (1, 16, 256)  # block sizes of the upload part
QUICK_UPLOAD_MIB = (1, 4)


def _synchronized(backend, work):
    """``work`` and then a wait for the device's stream (what the copy costs, not only its enqueueing)."""

    def run():
        out = work()
        backend.xp.cuda.get_current_stream().synchronize()
        return out

    return run


def uploads(backend, sizes_mib, repeats: int) -> list[str]:
    rows = [
        "| block | through pinned buffers | pageable (`xp.asarray`) | pinned GB/s | pageable GB/s |",
        "|---|---:|---:|---:|---:|",
    ]
    rng = np.random.default_rng(0)
    for mib in sizes_mib:
        block = np.asfortranarray(rng.random((mib * 2**20 // 64, 8)))
        pinned, pageable, _, _ = interleaved(
            _synchronized(backend, lambda block=block: backend.to_device(block)),
            _synchronized(backend, lambda block=block: backend.xp.asarray(block)),
            repeats,
        )
        gb = block.nbytes / 1e9
        rows.append(
            f"| {mib} MiB | {pinned * 1e3:.2f} ms | {pageable * 1e3:.2f} ms | {gb / pinned:.1f} | {gb / pageable:.1f} |"
        )
    return rows


def streamed(backend_name: str, rows: int, iterations: int, repeats: int) -> list[str]:
    con = duckdb.connect()
    star = make_star_schema(
        con, fact_rows=rows, fact_features=8, n_dims=2, dim_rows=rows // 100, dim_features=8, seed=26
    )
    label = star_label(star.query())
    run = dict(tol=0.0, max_iter=iterations, reuse=False)

    def fit(memory_budget: int | None, **params: object) -> ilargi_db.TrainedModel:
        return ilargi_db.train(
            con,
            label,
            "label",
            "logistic_regression",
            "factorized",
            backend_name,
            memory_budget=memory_budget,
            **params,
        )

    probe = fit(rows * 50, max_iter=1, reuse=False)
    if probe.streamed_ is None:
        raise SystemExit("the job fits in 50 bytes a fact row: give more --rows")
    budget = max(probe.streamed_["needed"] // 10, 1)
    table = ["| configuration | partitions | later pass (median of repeats) |", "|---|---:|---:|"]
    results: dict[str, list[float]] = {}
    passes = record_seconds(LogisticRegression, "objective")  # every evaluation of the loss: one pass
    for _ in range(repeats):
        for name, memory_budget, prefetch in (
            ("in memory", None, True),
            ("streamed, prefetch on", budget, True),
            ("streamed, prefetch off", budget, False),
        ):
            partitions.PREFETCH = prefetch
            first = len(passes)
            m = fit(memory_budget, **run)
            results.setdefault(name, []).append(later_passes(passes[first:]))
            results[name + " partitions"] = [m.streamed_["partitions"] if m.streamed_ else 1]
    partitions.PREFETCH = True
    for name in ("in memory", "streamed, prefetch on", "streamed, prefetch off"):
        table.append(
            f"| {name} | {results[name + ' partitions'][0]} | {statistics.median(results[name]) * 1e3:.1f} ms |"
        )
    return table


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__, quick="small sizes, a smoke run (seconds)", rows=2_000_000, repeats=5)
    args_parser.add_argument("--backend", default="cupy", help="the device backend (cupy); numpy for a smoke run")
    args_parser.add_argument("--iterations", type=int, default=10)
    args = args_parser.parse_args(argv)
    warnings.simplefilter("ignore")  # L-BFGS stopped at max_iter on purpose
    iterations = 3 if args.quick else args.iterations
    started = time.perf_counter()
    backend = get_backend(args.backend)
    rows = 20_000 if args.quick else args.rows
    lines = ["## Host-to-device transfers (`benchmarks/bench_transfer.py`)", ""]
    if hasattr(backend.xp, "cuda"):
        lines += ["Uploads of a column-major float64 block, each followed by a stream synchronization:", ""]
        lines += uploads(backend, QUICK_UPLOAD_MIB if args.quick else UPLOAD_MIB, args.repeats) + [""]
    lines += [
        f"Streamed logistic regression (L-BFGS, `tol=0`, {iterations} iterations), star schema of {rows:,} "
        "fact rows, budget a tenth of the data:",
        "",
    ]
    lines += streamed(args.backend, rows, iterations, 1 if args.quick else args.repeats)
    lines += ["", ran(command(__file__, argv), time.perf_counter() - started, f"backend {backend.name}")]
    publish(lines, args.output, "bench_transfer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
