"""The fused CUDA kernels (``CudaKernels``, ``CudaTreeKernels``) against the reference's CuPy array operations, kernel
by kernel, on a GPU.

Issue 26, item 2. Each kernel of the contract runs on the same device arrays both ways, timed alternately in
one process (medians of ``--repeats``, each call followed by a synchronization of the stream, after a first
call that compiles the kernel), on a normalized matrix's layout of ``--rows`` rows: a dense block of 8
columns, 3 indexed blocks of ``--rows / 100`` rows each. The table shows milliseconds a call and the speed-up.

Needs a CUDA GPU and CuPy; without them it says so and exits. ``--double`` runs it on the test suite's device
double instead (the CUDA C emulated on the host, one thread after another: a smoke run of the script, its
times say nothing about a GPU).

    python benchmarks/bench_cuda_kernels.py --output docs/benchmarks.md
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from harness.cli import command, parser  # noqa: E402
from harness.report import publish, ran  # noqa: E402
from harness.timing import interleaved  # noqa: E402

from ilargi_db.backend import get_backend  # noqa: E402
from ilargi_db.backend.cuda_kernels import CudaKernels  # noqa: E402
from ilargi_db.backend.cuda_tree_kernels import CudaTreeKernels  # noqa: E402
from ilargi_db.backend.kernels import ReferenceKernels  # noqa: E402
from ilargi_db.backend.tree_reference import ReferenceTreeKernels  # noqa: E402
from ilargi_db.errors import BackendUnavailableError  # noqa: E402
from ilargi_db.linalg.binned_matrix import BinnedBlock, BinnedMatrix, FlatBins  # noqa: E402
from ilargi_db.linalg.feature_bins import FeatureBins  # noqa: E402

DENSE, BLOCKS, OUTPUTS, CLUSTERS, MISSING_BIN = 8, 3, 8, 8, 255


def device_backend(double: bool):
    if double:
        from tests.device_double import register  # the repository root on sys.path: run from it

        return register()
    try:
        return get_backend("cupy")
    except BackendUnavailableError as err:
        raise SystemExit(f"bench_cuda_kernels needs a CUDA GPU with CuPy: {err}") from None


def device_name(backend) -> str:
    try:
        name = backend.xp.cuda.runtime.getDeviceProperties(0)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except AttributeError:
        return "the device double (CUDA C emulated on the host, serially)"


def workloads(backend, rows: int, seed: int = 26) -> dict:
    """Each kernel's arguments on the device, by the kernel's name."""
    rng = np.random.default_rng(seed)
    r = max(rows // 100, 2)
    up = backend.to_device
    dense = up(np.asfortranarray(rng.normal(size=(rows, DENSE))))
    index = up(np.asfortranarray(rng.integers(0, r, (rows, BLOCKS)), dtype=np.int32))
    tables, v, d = up(rng.normal(size=(BLOCKS, r, OUTPUTS))), up(rng.normal(size=rows)), up(rng.random(rows))
    table, data_a = up(rng.normal(size=(r, OUTPUTS))), up(rng.normal(size=(r, 4)))
    w_dense, centers = up(rng.normal(size=(DENSE, OUTPUTS))), up(rng.normal(size=(DENSE, CLUSTERS)))
    ctables, offsets = up(rng.normal(size=(BLOCKS, r, CLUSTERS))), up(rng.normal(size=CLUSTERS))
    labels = up(rng.integers(0, CLUSTERS, rows))
    scatter, gather = index[:, 0], index[:, 1]
    by_key = ReferenceKernels(np).rows_by_key(rng.integers(0, r, rows).astype(np.int32), r)
    z, y = up(rng.normal(scale=3, size=rows)), up((rng.random(rows) < 0.5).astype(float))
    W, numerator, gram = up(rng.random((rows, 8))), up(rng.random((rows, 8))), up(rng.random((8, 8)))
    return {
        "gather_sum": (dense, w_dense, index, tables),
        "segment_sums": (dense, index, r, v),
        "gram_pass": (dense, index, r, d),
        "scatter_gathered": (scatter, gather, table, r, d),
        "pair_gram": (tuple(up(a) for a in by_key), gather, data_a, table, d),
        "sparse_pair_gram": (scatter, gather, *(one_hot(backend, rng, r, 20) for _ in range(2)), d),
        "nearest": (dense, centers, index, ctables, offsets),
        "label_sums": (dense, index, r, labels, CLUSTERS),
        "logistic_loss_residual": (z, y),
        "multiplicative_update": (W, numerator, gram, 1e-10),
        "node_histogram": tree_workload(backend, rng, rows, r),
    }


def one_hot(backend, rng, rows: int, categories: int):
    """A one-hot block: each of ``rows`` rows one of ``categories`` columns (CSR on the device)."""
    import scipy.sparse

    codes = rng.integers(0, categories, rows)
    matrix = scipy.sparse.csr_matrix((np.ones(rows), (np.arange(rows), codes)), shape=(rows, categories))
    return backend.to_device(matrix)


def tree_workload(backend, rng, rows: int, r: int) -> tuple:
    """A node of half the rows over the fact's block (8 features) and 3 dimensions of 4 features each."""
    blocks, first = [], 0
    for c, n_source in ((8, rows), (4, r), (4, r), (4, r)):
        index = None if not blocks else rng.integers(0, n_source, rows)
        codes = rng.integers(0, MISSING_BIN, (n_source, c)).astype(np.uint8)
        blocks.append(BinnedBlock(codes, index, np.arange(first, first + c), np.full(c, MISSING_BIN, np.uint8)))
        first += c
    bins = [FeatureBins(f"x{j}", False, np.arange(MISSING_BIN - 1, dtype=float)) for j in range(first)]
    flat = FlatBins.of(BinnedMatrix(blocks, rows, bins, MISSING_BIN), gather_width=0)
    arrays = {f.name: getattr(flat, f.name) for f in dataclasses.fields(flat)}
    flat = dataclasses.replace(
        flat, **{k: backend.to_device(a) for k, a in arrays.items() if isinstance(a, np.ndarray)}
    )
    node = backend.to_device(np.sort(rng.permutation(rows)[: rows // 2]).astype(np.int64))
    g, h = backend.to_device(rng.normal(size=rows)), backend.to_device(rng.random(rows))
    return flat, node, g, h, None, False


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__, quick="small sizes, a smoke run (seconds)", rows=10_000_000, repeats=10)
    args_parser.add_argument("--double", action="store_true", help="on the test suite's device double (smoke run)")
    args = args_parser.parse_args(argv)
    started = time.perf_counter()
    backend = device_backend(args.double)
    rows = 20_000 if args.quick else args.rows
    repeats = 2 if args.quick else args.repeats
    xp = backend.xp
    fused, reference = CudaKernels(xp), ReferenceKernels(xp)
    fused_tree, reference_tree = CudaTreeKernels(xp), ReferenceTreeKernels(xp)
    table = ["| kernel | reference (CuPy operations) | CUDA kernel | speed-up |", "|---|---:|---:|---:|"]
    for name, call in workloads(backend, rows).items():
        ours, theirs = (fused_tree, reference_tree) if name == "node_histogram" else (fused, reference)

        def timed(kernels, name=name, call=call):
            def run():
                out = getattr(kernels, name)(*call)
                xp.cuda.get_current_stream().synchronize()
                return out

            return run

        base, cuda, _, _ = interleaved(timed(theirs), timed(ours), repeats)
        table.append(f"| `{name}` | {base * 1e3:.2f} ms | {cuda * 1e3:.2f} ms | {base / cuda:.1f}x |")
    lines = ["## Fused CUDA kernels (`benchmarks/bench_cuda_kernels.py`)", ""]
    lines += [
        f"{rows:,} rows: a dense block of {DENSE} columns, {BLOCKS} indexed blocks of {max(rows // 100, 2):,} rows, "
        f"{OUTPUTS} outputs, {CLUSTERS} clusters; the histogram over half the rows, 20 features. Device: "
        f"{device_name(backend)}.",
        "",
        *table,
        "",
        ran(command(__file__, argv), time.perf_counter() - started, f"backend {backend.name}"),
    ]
    publish(lines, args.output, "bench_cuda_kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
