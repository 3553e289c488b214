"""The analytical (roofline) model: FLOPs and bytes of each strategy over measured throughput.

Each strategy pays a data phase once (DuckDB's joins, Arrow transfer, casting
and encoding) and an iteration phase per pass over the data. A pass costs
max(FLOPs / FLOP rate, bytes / memory bandwidth), the roofline of the
operations the algorithm runs on T (LMM, T^T V, crossprod). The materialized
strategy works on the n x d join; the factorized one on the source blocks
S_k plus gathers and scatter-adds of length n per block (the I_k). The
constants below are per-element costs of this code base (Arrow casts, hash
probes, Python per block), not tuned to a machine: the learned model corrects
them for a machine after calibration.
"""

from __future__ import annotations

from ilargi_db.cost_model.hardware import Hardware

STRATEGIES = ("factorized", "materialized")
HASH_PROBE_S = 25e-9  # one probe of a DuckDB hash join, per row and core
STRING_ENCODE_S = 80e-9  # one categorical value hashed into its category
DATA_PASSES = 4  # a join cell is written by DuckDB, moved to Arrow, cast to float64 and stacked
GATHER_BYTES = 24  # an index read plus a value read and written, per row and block column
SCATTER_BYTES = 40  # a segment-sum element: index, value, random read-modify-write
PCIE_GBS = 12.0  # host-to-GPU copies
KERNEL_S = 15e-6  # one GPU kernel launch


def _blocks(features: dict) -> list[tuple[float, float]]:
    """(rows, columns) of the factorized blocks: the fact's and each dimension's, as one block each."""
    n_dims = int(features["n_dimensions"])
    blocks = [(float(features["rows_fact"]), float(features["columns_fact"]))]
    if n_dims:
        rows = float(features["rows_dimensions"]) / n_dims
        cols = float(features["columns_dimensions"]) / n_dims
        blocks += [(rows, cols)] * n_dims
    return [(r, c) for r, c in blocks if c > 0]


def work(features: dict, strategy: str) -> dict[str, float]:
    """FLOPs and bytes per iteration, bytes and hash probes of the data phase, for one strategy.

    >>> f = {"rows": 1000, "rows_fact": 1000, "rows_dimensions": 10, "n_dimensions": 1, "n_sources": 2,
    ...      "columns": 6, "columns_fact": 2, "columns_dimensions": 4, "columns_onehot": 0,
    ...      "algorithm": "logistic_regression", "rank": 1}
    >>> work(f, "materialized")["flops_per_iteration"], work(f, "factorized")["flops_per_iteration"]
    (24000.0, 10160.0)
    """
    n, d, k = float(features["rows"]), float(features["columns"]), float(features["rank"])
    algorithm = features["algorithm"]
    blocks = _blocks(features)
    nb = float(len(blocks))
    probes = n * max(int(features["n_sources"]) - 1, 0)
    if strategy == "materialized":
        cells = n * d
        gathers = scatters = 0.0
        block_flops = {"lmm": 2 * cells, "crossprod": n * d * d}
        setup_bytes = DATA_PASSES * 8 * cells
        strings = n * float(features.get("categorical_features", 0))
        python_ops = 1.0
    else:
        cells = sum(r * c for r, c in blocks)
        dims = blocks[1:]
        gathers = n * (nb - 1)  # the fact's block is in output order: no gather
        scatters = gathers
        cross = sum(n * c + r * c * c2 for i, (r, c) in enumerate(blocks) for (_, c2) in blocks[i + 1 :])
        block_flops = {"lmm": 2 * cells, "crossprod": sum(r * c * c for r, c in blocks) + 2 * cross}
        # Scans of every source, the key-only join's row numbers (one per source and output row).
        setup_bytes = DATA_PASSES * 8 * (cells + n * float(features["n_sources"]))
        strings = float(features.get("categorical_source_rows", 0))
        python_ops = 1.0 + len(dims)
        del dims
    if algorithm == "linear_regression" and features.get("iterations", 1) == 1:
        flops = block_flops["crossprod"]
        moved = 8 * cells + (SCATTER_BYTES * n * nb * (nb - 1) / 2 if strategy == "factorized" else 0.0)
        ops = 1.0
    else:
        passes = {"linear_regression": 2.0, "logistic_regression": 2.0, "kmeans": 2.0, "gnmf": 3.0}[algorithm]
        width = 1.0 if algorithm in ("linear_regression", "logistic_regression") else k
        flops = passes * block_flops["lmm"] * width + (gathers + scatters) * width
        moved = passes * 8 * cells + (GATHER_BYTES * gathers + SCATTER_BYTES * scatters) * width * passes / 2
        ops = passes
    return {
        "flops_per_iteration": float(flops),
        "bytes_per_iteration": float(moved),
        "data_bytes": float(setup_bytes),
        "hash_probes": float(probes),
        "strings": float(strings),
        "kernels_per_iteration": float(ops * python_ops),
    }


def breakdown(features: dict, strategy: str, hardware: Hardware, backend: str = "numpy") -> dict[str, float]:
    """Roofline seconds of ``strategy`` by phase: ``overhead``, ``data`` (once) and ``iterations`` (all passes)."""
    w = work(features, strategy)
    iterations = float(features.get("iterations", 1.0))
    bandwidth = hardware.memory_bandwidth_gbs * 1e9
    cores = max(hardware.cores, 1)
    data = w["data_bytes"] / bandwidth + w["hash_probes"] * HASH_PROBE_S / cores + w["strings"] * STRING_ENCODE_S
    overhead = 0.01 + 0.004 * float(features["n_sources"]) * (2 if strategy == "factorized" else 1)
    if backend == "cupy" and hardware.gpu_name:
        gpu_bw = max(hardware.gpu_bandwidth_gbs, 100.0) * 1e9
        gpu_flops = max(hardware.gpu_gflops, 1000.0) * 1e9
        data += (w["data_bytes"] / DATA_PASSES) / (PCIE_GBS * 1e9)  # one copy to the device
        step = max(w["flops_per_iteration"] / gpu_flops, w["bytes_per_iteration"] / gpu_bw)
        step += w["kernels_per_iteration"] * KERNEL_S * 4
    else:
        step = max(w["flops_per_iteration"] / (hardware.gflops * 1e9), w["bytes_per_iteration"] / bandwidth)
        step += w["kernels_per_iteration"] * 20e-6  # NumPy call overhead per block operation
    return {"overhead": overhead, "data": data, "iterations": iterations * step}


def predict_seconds(features: dict, strategy: str, hardware: Hardware, backend: str = "numpy") -> float:
    """Roofline seconds of ``strategy``: overhead + data phase + iterations x max(compute, memory).

    >>> from ilargi_db.cost_model.hardware import Hardware
    >>> hw = Hardware(cores=2, memory_bandwidth_gbs=10.0, gflops=50.0)
    >>> f = {"rows": 10**6, "rows_fact": 10**6, "rows_dimensions": 10**4, "n_dimensions": 1, "n_sources": 2,
    ...      "columns": 45, "columns_fact": 5, "columns_dimensions": 40, "columns_onehot": 0,
    ...      "algorithm": "logistic_regression", "rank": 1, "iterations": 25}
    >>> predict_seconds(f, "factorized", hw) < predict_seconds(f, "materialized", hw)
    True
    """
    return sum(breakdown(features, strategy, hardware, backend).values())
