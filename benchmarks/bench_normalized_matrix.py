#!/usr/bin/env python
"""Factorized (normalized matrix) vs materialized join: build time, linear algebra, peak memory.

Run from the repository root::

    python benchmarks/bench_normalized_matrix.py                 # full run (a few minutes at most)
    python benchmarks/bench_normalized_matrix.py --quick         # smoke run, smaller sizes
    python benchmarks/bench_normalized_matrix.py --output docs/benchmarks.md

What it measures, all in one run so that the ratios compare timings taken side by side:

1. Main case: a star schema (fact 1,000,000 x 5 floats, two foreign keys into two
   dimensions of 50,000 x 20 floats; tuple ratio 20, feature ratio 4). Building the
   normalized matrix (``ilargi_db.normalize``) vs DuckDB materializing the join into a
   NumPy matrix (``to_arrow_table`` + ``arrow_to_block``), then X @ w, X @ W, X.T @ v,
   X.T @ V, crossprod and colsums on both, each side timed in alternating blocks of calls
   (and, for the record, interleaved A B A B); medians, and each speed-up as a share of the
   operator's byte ratio.
2. Peak memory of each build, each in a fresh subprocess reading the same DuckDB file.
3. Targets: LMM >= 3x faster, build >= 3x faster, factorized peak memory <= 1/3.
4. A sweep over tuple ratio x feature ratio of X @ w, built without DuckDB.

Speed-up = materialized time / factorized time (> 1: the normalized matrix wins).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb
import numpy as np

import ilargi_db
from ilargi_db import Block, NormalizedMatrix
from ilargi_db.datasets import StarSchema, make_star_schema
from ilargi_db.metadata.arrow_blocks import arrow_to_block

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.machine import OtherProcesses, machine_facts  # noqa: E402
from harness.processes import max_rss_bytes, reset_hwm, rss_bytes, run_child, vm_hwm_bytes  # noqa: E402
from harness.report import now, write_section  # noqa: E402
from harness.timing import SETTLE_SECONDS, in_blocks, interleaved  # noqa: E402

TARGET_SPEEDUP = 3.0
TARGET_MEMORY = 1 / 3

SWEEP_TUPLE_RATIOS = (1, 2, 5, 10, 20, 50, 100)
SWEEP_FEATURE_RATIOS = (0.25, 0.5, 1, 2, 4, 8)
SWEEP_FACT_FEATURES = 4


@dataclass(frozen=True)
class Config:
    fact_rows: int = 1_000_000
    fact_features: int = 5
    n_dims: int = 2
    dim_rows: int = 50_000
    dim_features: int = 20
    lmm_width: int = 8  # columns of the matrix operand in X @ W and X.T @ V
    build_repeats: int = 5
    op_repeats: int = 11
    op_min_seconds: float = 0.5  # per side: fast operators repeat more often
    op_rounds: int = 3  # blocks of each side, alternating
    op_block: int = 7  # timed calls in a row per block
    sweep_fact_rows: int = 200_000
    sweep_rounds: int = 3  # passes over the whole grid; a point's time is its best pass
    sweep_min_repeats: int = 11
    sweep_min_seconds: float = 0.15  # per side, point and pass, as above

    def schema_kwargs(self) -> dict:
        return dict(
            fact_rows=self.fact_rows,
            fact_features=self.fact_features,
            n_dims=self.n_dims,
            dim_rows=self.dim_rows,
            dim_features=self.dim_features,
        )


FULL = Config()
QUICK = Config(
    fact_rows=100_000,
    dim_rows=5_000,
    build_repeats=3,
    op_repeats=5,
    op_min_seconds=0.0,
    op_rounds=2,
    op_block=3,
    sweep_fact_rows=20_000,
    sweep_rounds=2,
    sweep_min_repeats=5,
    sweep_min_seconds=0.02,
)


# -- measuring ------------------------------------------------------------------------------


def materialize_join(con: duckdb.DuckDBPyConnection, query: str, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The baseline: DuckDB joins, returns Arrow; one copy per column into a Fortran-order matrix."""
    table = con.sql(query).to_arrow_table()
    return arrow_to_block(table, names), table.column("y").to_numpy()


def factorize(con: duckdb.DuckDBPyConnection, query: str) -> tuple[NormalizedMatrix, np.ndarray]:
    return ilargi_db.normalize(con, query, target="y", backend="numpy")


# -- 2. peak memory, in a fresh process -----------------------------------------------------


def peak_child(kind: str, db: str, sizes: dict) -> None:
    """Open the database read-only, build once, print one JSON line (bytes).

    ``ru_maxrss`` of a process started by ``subprocess`` also holds its parent's RSS at the
    time of the spawn (Linux keeps the high-water mark across fork/vfork + exec), so this
    also resets and reads VmHWM, the peak of this process's own address space, which is
    exact whatever the parent held. Both are reported.
    """
    con = ilargi_db.connect(db, read_only=True)
    query = StarSchema(**sizes).query()
    names = [c for c in con.sql(query).columns if c != "y"]
    con.sql("SELECT count(*) FROM fact").fetchall()  # DuckDB started; the data is not read yet
    gc.collect()
    before = rss_bytes()
    ru_before = max_rss_bytes()
    hwm_reset = reset_hwm()
    t0 = time.perf_counter()
    if kind == "factorized":
        X, y = factorize(con, query)
        result = X.nbytes + y.nbytes  # the blocks and their row indices
    elif kind == "materialized":
        T, y = materialize_join(con, query, names)
        result = T.nbytes + y.nbytes
    else:
        raise SystemExit(f"unknown --peak kind {kind!r}")
    seconds = time.perf_counter() - t0
    after = rss_bytes()
    ru_peak = max_rss_bytes()
    hwm = vm_hwm_bytes() if hwm_reset else None
    out = dict(kind=kind, before=before, after=after, ru_before=ru_before, ru_peak=ru_peak, hwm=hwm)
    print(json.dumps(dict(out, result=result, seconds=seconds)))


def measure_peak(kind: str, db: str, config: Config) -> dict:
    out = run_child(__file__, kind, db, json.dumps(config.schema_kwargs()))
    out["ru_delta"] = max(0, out["ru_peak"] - out["before"])
    # The ratio uses VmHWM where it could be reset, else ru_maxrss.
    out["delta"] = max(0, out["hwm"] - out["before"]) if out["hwm"] is not None else out["ru_delta"]
    out["source"] = "VmHWM" if out["hwm"] is not None else "ru_maxrss"
    out["retained"] = max(0, out["after"] - out["before"])
    return out


# -- 1. the main case -----------------------------------------------------------------------


def check_same_matrix(X: NormalizedMatrix, y: np.ndarray, T: np.ndarray, y_t: np.ndarray) -> list[str]:
    """Row orders differ (the normalized matrix keeps the fact's order): compare order-free results."""
    problems = []
    if X.shape != T.shape:
        problems.append(f"shape {X.shape} vs {T.shape}")
        return problems
    w = np.random.default_rng(1).standard_normal(X.shape[1])
    checks = {
        "crossprod": (X.crossprod(), T.T @ T),
        "colsums": (X.colsums(), T.sum(axis=0)),
        "sorted X @ w": (np.sort(X @ w), np.sort(T @ w)),
        "X.T @ y": (X.T @ y, T.T @ y_t),
    }
    for name, (a, b) in checks.items():
        if not np.allclose(a, b, rtol=1e-9, atol=1e-6 * max(1.0, float(np.abs(b).max()))):
            problems.append(f"{name} differs (max abs diff {float(np.abs(a - b).max()):.3g})")
    return problems


def run_main(con: duckdb.DuckDBPyConnection, schema: StarSchema, config: Config, log: Callable) -> dict:
    query = schema.query()
    names = [c for c in con.sql(query).columns if c != "y"]
    n, d, p = schema.fact_rows, len(names), config.lmm_width

    log(f"building: normalize() vs DuckDB join -> Arrow -> NumPy, {config.build_repeats} interleaved repeats")
    fact_build, mat_build, fact_cold, mat_cold = interleaved(
        lambda: factorize(con, query), lambda: materialize_join(con, query, names), config.build_repeats
    )
    # The two steps of the baseline, for the record (not used in the ratios).
    arrow_s, numpy_s = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        table = con.sql(query).to_arrow_table()
        t1 = time.perf_counter()
        block = arrow_to_block(table, names)
        numpy_s.append(time.perf_counter() - t1)
        arrow_s.append(t1 - t0)
        del table, block
    X, y = factorize(con, query)
    T, y_t = materialize_join(con, query, names)
    log(f"  normalize {fact_build * 1e3:.0f} ms, materialize {mat_build * 1e3:.0f} ms ({X!r})")
    if X.feature_names != names:
        raise RuntimeError(f"feature names differ: {X.feature_names} vs {names}")
    problems = check_same_matrix(X, y, T, y_t)
    if problems:
        raise RuntimeError("factorized and materialized results differ: " + "; ".join(problems))
    log("  results agree (crossprod, colsums, sorted X @ w, X.T @ y)")

    rng = np.random.default_rng(0)
    w, W = rng.standard_normal(d), rng.standard_normal((d, p))
    v, V = rng.standard_normal(n), rng.standard_normal((n, p))
    t_bytes, x_bytes = int(T.nbytes), int(X.nbytes)
    ops = [
        # key, label, factorized, materialized, bytes both sides read or write besides the matrix
        ("lmm", f"LMM `X @ w`, w ({d},)", lambda: X @ w, lambda: T @ w, 8 * n),
        ("lmm_matrix", f"LMM `X @ W`, W ({d}, {p})", lambda: X @ W, lambda: T @ W, 8 * n * p),
        ("tlmm", f"transposed LMM `X.T @ v`, v ({n},)", lambda: X.T @ v, lambda: T.T @ v, 8 * n),
        ("tlmm_matrix", f"transposed LMM `X.T @ V`, V ({n}, {p})", lambda: X.T @ V, lambda: T.T @ V, 8 * n * p),
        ("crossprod", "crossprod `X.T @ X`", lambda: unmemoized(X, X.crossprod), lambda: T.T @ T, 0),
        ("colsums", "colsums", lambda: unmemoized(X, X.colsums), lambda: T.sum(axis=0), 0),
    ]
    rows = [
        dict(
            key="build",
            label="build (normalize vs join -> NumPy)",
            fact=fact_build,
            mat=mat_build,
            fact_cold=fact_cold,
            mat_cold=mat_cold,
        )
    ]
    for key, label, f, g, operand_bytes in ops:
        log(f"timing {label} ...")
        ft, mt = in_blocks(f, g, config.op_rounds, config.op_block, config.op_min_seconds)
        ift, imt, fc, mc = interleaved(f, g, config.op_repeats, config.op_min_seconds)
        byte_ratio = (t_bytes + operand_bytes) / (x_bytes + operand_bytes)
        rows.append(
            dict(key=key, label=label, fact=ft, mat=mt, fact_cold=fc, mat_cold=mc, byte_ratio=byte_ratio)
            | dict(fact_interleaved=ift, mat_interleaved=imt)
        )
        log(
            f"  in blocks: factorized {ft * 1e3:.1f} ms, materialized {mt * 1e3:.1f} ms, speed-up {mt / ft:.2f}x "
            f"({mt / ft / byte_ratio:.0%} of the {byte_ratio:.1f}x byte ratio); interleaved {imt / ift:.2f}x"
        )
    return dict(
        rows=rows,
        arrow_s=float(np.median(arrow_s)),
        numpy_s=float(np.median(numpy_s)),
        shape=list(X.shape),
        blocks=repr(X),
        t_bytes=t_bytes,
        x_bytes=x_bytes,  # the blocks and their row indices
    )


def unmemoized(X: NormalizedMatrix, operator: Callable[[], np.ndarray]) -> np.ndarray:
    """``operator()`` computed, not the sum the matrix memoized from the previous call."""
    X.memo.clear()
    return operator()


# -- 4. the sweep ---------------------------------------------------------------------------


def sweep_point(n: int, tr: int, fr: float, rng: np.random.Generator) -> tuple[NormalizedMatrix, np.ndarray, dict]:
    """One grid point: the normalized matrix, its materialized twin and its sizes."""
    dim_rows = max(1, round(n / tr))
    dim_features = max(1, round(SWEEP_FACT_FEATURES * fr))
    d = SWEEP_FACT_FEATURES + dim_features
    fact = np.asfortranarray(rng.random((n, SWEEP_FACT_FEATURES)))
    dim = np.asfortranarray(rng.random((dim_rows, dim_features)))
    index = rng.integers(0, dim_rows, size=n).astype(np.int32)  # normalize() gives int32 indices too
    X = NormalizedMatrix(
        [
            Block(fact, columns=range(SWEEP_FACT_FEATURES)),
            Block(dim, columns=range(SWEEP_FACT_FEATURES, d), index=index),
        ],
        n_rows=n,
        backend="numpy",
    )
    T = np.asfortranarray(X.materialize())  # same layout as the DuckDB-materialized matrix
    return X, T, dict(tr=tr, fr=fr, dim_rows=dim_rows, dim_features=dim_features)


def run_sweep(config: Config, log: Callable) -> dict:
    """Time X @ w over the grid, in ``sweep_rounds`` passes over the whole grid.

    Each pass times every point (interleaved repeats, median); a point's time is the best
    of its passes. On this shared VM the BLAS calls sometimes fall into a slow state
    lasting a few hundred milliseconds (every call ~8 ms longer, both sides); taking the
    best pass keeps such a burst from deciding a grid cell.
    """
    n = config.sweep_fact_rows
    rng = np.random.default_rng(42)
    points = {}
    for tr in SWEEP_TUPLE_RATIOS:
        for fr in SWEEP_FEATURE_RATIOS:
            X, T, info = sweep_point(n, tr, fr, rng)
            w = rng.standard_normal(X.shape[1])
            if not np.allclose(X @ w, T @ w):
                raise RuntimeError(f"sweep TR={tr} FR={fr}: X @ w differs from the materialized product")
            points[(tr, fr)] = dict(info, X=X, T=T, w=w, fact=[], mat=[])
    for r in range(config.sweep_rounds):
        for p in points.values():
            ft, mt, _, _ = interleaved(
                lambda p=p: p["X"] @ p["w"],
                lambda p=p: p["T"] @ p["w"],
                config.sweep_min_repeats,
                config.sweep_min_seconds,
            )
            p["fact"].append(ft)
            p["mat"].append(mt)
        log(f"  pass {r + 1} of {config.sweep_rounds} done")
    grid: dict[str, dict[str, float]] = {}
    rows = []
    for (tr, fr), p in points.items():
        ft, mt = min(p["fact"]), min(p["mat"])
        grid.setdefault(str(tr), {})[str(fr)] = mt / ft
        rows.append({k: v for k, v in p.items() if k not in ("X", "T", "w")} | dict(fact_best=ft, mat_best=mt))
    for tr in SWEEP_TUPLE_RATIOS:
        log(f"  TR={tr:>3}: " + "  ".join(f"FR {fr:g}: {grid[str(tr)][str(fr)]:.2f}x" for fr in SWEEP_FEATURE_RATIOS))
    return dict(grid=grid, points=rows, fact_rows=n)


def sweep_summary(sweep: dict) -> list[str]:
    """Where the factorized LMM stops winning, per feature ratio."""
    grid, lines = sweep["grid"], []
    for fr in SWEEP_FEATURE_RATIOS:
        speed = {tr: grid[str(tr)][str(fr)] for tr in SWEEP_TUPLE_RATIOS}
        losing = [tr for tr, s in speed.items() if s < 1]
        winning = [tr for tr, s in speed.items() if s >= 1]
        lost = ", ".join(f"TR {tr} ({speed[tr]:.2f}x)" for tr in losing)
        won = ", ".join(f"TR {tr} ({speed[tr]:.2f}x)" for tr in winning)
        if not losing:
            lines.append(f"FR {fr:g}: factorized wins at every tuple ratio tested (>= {min(speed.values()):.2f}x)")
        elif not winning:
            lines.append(f"FR {fr:g}: factorized never wins (best {max(speed.values()):.2f}x); loses at {lost}")
        elif all(tr > max(losing) for tr in winning):
            lines.append(
                f"FR {fr:g}: factorized wins from TR {min(winning)} up ({won}); stops winning below, at {lost}"
            )
        else:
            lines.append(f"FR {fr:g}: no clean threshold; wins at {won}; loses at {lost}")
    return lines


# -- targets and reporting ------------------------------------------------------------------


# Issue 10's operator targets: speed-up over NumPy/BLAS on the materialized matrix, at TR 20 / FR 4.
OPERATOR_TARGETS = (
    ("lmm", "LMM `X @ w`", 4.0),
    ("tlmm", "transposed LMM `X.T @ v`", 4.0),
    ("lmm_matrix", "LMM `X @ W` (8 columns)", 2.0),
    ("crossprod", "crossprod `X.T @ X`", 2.0),
)


def targets(main: dict, memory: dict) -> list[dict]:
    by_key = {r["key"]: r for r in main["rows"]}
    out = []
    for key, label, target in OPERATOR_TARGETS:
        s, byte_ratio = by_key[key]["mat"] / by_key[key]["fact"], by_key[key]["byte_ratio"]
        value = f"{s:.2f}x ({s / byte_ratio:.0%} of the {byte_ratio:.1f}x byte ratio)"
        miss = f"{s:.2f}x vs {target:g}x: reaches {s / target:.0%} of the target; needs {target / s:.2f}x more"
        out.append(dict(label=f"{label} >= {target:g}x faster", value=value, ok=s >= target, miss=miss))
    s = by_key["build"]["mat"] / by_key["build"]["fact"]
    out.append(dict(label="building >= 3x faster", value=f"{s:.2f}x", ok=s >= TARGET_SPEEDUP, miss=_speed_miss(s)))
    ratio = memory["ratio"]
    miss = (
        f"{ratio:.3f} vs <= {TARGET_MEMORY:.3f}: {ratio / TARGET_MEMORY:.2f}x over the limit, "
        f"{(ratio - TARGET_MEMORY) * memory['materialized']['delta'] / 2**20:.0f} MiB too much"
    )
    out.append(
        dict(
            label="peak memory factorized <= 1/3 of materialized",
            value=f"{ratio:.3f}",
            ok=ratio <= TARGET_MEMORY,
            miss=miss,
        )
    )
    return out


def _speed_miss(s: float) -> str:
    return f"{s:.2f}x vs 3x: reaches {s / TARGET_SPEEDUP:.0%} of the target; needs {TARGET_SPEEDUP / s:.2f}x more"


def ms(s: float) -> str:
    return f"{s * 1e3:.1f}" if s < 10 else f"{s:.1f} s"


def mib(b: float) -> str:
    return f"{b / 2**20:.0f}"


def render_markdown(res: dict) -> str:
    cfg, main, mem, sweep, facts = res["config"], res["main"], res["memory"], res["sweep"], res["facts"]
    L = []
    L.append("## Normalized matrix vs materialized join (`benchmarks/bench_normalized_matrix.py`)")
    L.append("")
    L.append(f"Generated by the script on {res['date']} ({res['seconds']:.0f} s wall time). Command:")
    L.append("")
    L.append("```")
    L.append(res["command"])
    L.append("```")
    L.append("")
    L.append(
        "**Machine.** " + f"{facts.get('cpu', '?')}, {facts['cpus']} cores ({facts['usable_cpus']} usable), "
        f"{facts.get('memory', '?')} RAM, {facts['platform']}. Python {facts['python']}, "
        f"NumPy {facts['numpy']} (BLAS: {facts['blas_build']}; at run time {facts['blas_runtime']}), "
        f"DuckDB {facts['duckdb']} ({facts['duckdb_threads']} threads), PyArrow {facts.get('pyarrow', '?')}, "
        f"SciPy {facts.get('scipy', '?')}, ilargi_db {facts['ilargi_db']} at git {facts['git']}. "
        f"Other processes used {res['others']:.1%} of the machine's CPU time during the run "
        f"(1-minute load average {res['load'][0]:.2f} before it); CPU steal time: {res['steal']:.1%} "
        "(a shared VM: timings are noisy, so "
        "factorized and materialized repeats are interleaved and ratios come from the same run)."
    )
    L.append("")
    L.append(f"### Main case: tuple ratio {res['tuple_ratio']:g}, feature ratio {res['feature_ratio']:g}")
    L.append("")
    L.append(
        f"Fact {cfg['fact_rows']:,} rows x {cfg['fact_features']} floats with {cfg['n_dims']} foreign keys; "
        f"{cfg['n_dims']} dimensions of {cfg['dim_rows']:,} rows x {cfg['dim_features']} floats; "
        f"X is {main['shape'][0]:,} x {main['shape'][1]} ({main['blocks']}). Data generated once into a DuckDB "
        "file, read through a read-only connection. Materialized = `con.sql(query).to_arrow_table()` + "
        "`arrow_to_block` (Fortran-order float64), timed together; factorized = "
        "`ilargi_db.normalize(con, query, target='y', backend='numpy')`. One untimed warm-up each "
        f"(its time is the 'first call' column), then the median of {cfg['build_repeats']} interleaved "
        f"repeats (build) or of blocks of calls (operators, below; more until each side has run "
        f"{cfg['op_min_seconds']:g} s). Results were checked to agree "
        "(crossprod, colsums, sorted `X @ w`, `X.T @ y`)."
    )
    L.append("")
    L.append(
        "| operation | factorized (ms) | materialized (ms) | speed-up | byte ratio | share of it "
        "| interleaved speed-up | first call: factorized / materialized (ms) |"
    )
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in main["rows"]:
        s = r["mat"] / r["fact"]
        bytes_cells = f"{r['byte_ratio']:.1f}x | {s / r['byte_ratio']:.0%}" if "byte_ratio" in r else "| "
        inter = f"{r['mat_interleaved'] / r['fact_interleaved']:.2f}x" if "fact_interleaved" in r else ""
        L.append(
            f"| {r['label']} | {ms(r['fact'])} | {ms(r['mat'])} | **{s:.2f}x** | {bytes_cells} | {inter} "
            f"| {ms(r['fact_cold'])} / {ms(r['mat_cold'])} |"
        )
    L.append("")
    L.append(
        "Operators are timed in blocks (the headline): each side runs "
        f"{cfg['op_block']} calls in a row after a pause of {SETTLE_SECONDS:g} s and one untimed call, blocks "
        f"alternate ({cfg['op_rounds']} or more each), medians. A user's loop over one operator sees this. "
        "'Interleaved' alternates single calls (A B A B), so every factorized call follows a two-thread BLAS "
        "call whose idle worker still spins on a core for about 0.1 s (OpenBLAS's thread timeout), taking it "
        "from the fused kernels. Byte ratio = "
        "bytes the materialized operator reads and writes (T, the operand, the result) over the factorized "
        "one's (the blocks and indices, the operand, the result); 'share of it' = speed-up / byte ratio. "
        "crossprod and colsums clear the matrix's memo before each call (it keeps them once computed)."
    )
    L.append("")
    L.append(
        f"The materialized build splits into DuckDB join -> Arrow {ms(main['arrow_s'])} ms and Arrow -> NumPy "
        f"{ms(main['numpy_s'])} ms (medians of 3, separate from the table). Result sizes: X's blocks and "
        f"indices {mib(main['x_bytes'])} MiB, T {mib(main['t_bytes'])} MiB."
    )
    L.append("")
    L.append("### Peak memory of the build")
    L.append("")
    L.append(
        "Each build runs once in a fresh subprocess that opens the DuckDB file read-only. "
        "Peak = high-water RSS during the build minus RSS (`/proc/self/statm`) just before it. The high-water "
        "mark is VmHWM (`/proc/self/status`), reset right before the build through `/proc/self/clear_refs`; "
        "`ru_maxrss` is shown too, but a child started by `subprocess` inherits its parent's RSS as a floor "
        "of `ru_maxrss` (Linux keeps the mark across vfork + exec), so it can over-state small builds. "
        "'Retained' = RSS after minus before; 'result' = bytes of the arrays returned."
    )
    L.append("")
    L.append(
        "| build | peak over pre-build RSS (MiB) | `ru_maxrss` - pre-build RSS (MiB) | retained (MiB) "
        "| result arrays (MiB) | build time (ms) |"
    )
    L.append("|---|---:|---:|---:|---:|---:|")
    for kind in ("factorized", "materialized"):
        m = mem[kind]
        L.append(
            f"| {kind} | {mib(m['delta'])} | {mib(m['ru_delta'])} | {mib(m['retained'])} | {mib(m['result'])} "
            f"| {ms(m['seconds'])} |"
        )
    L.append("")
    L.append(
        f"Ratio factorized / materialized peak: **{mem['ratio']:.3f}** "
        f"(materialized needs {1 / mem['ratio']:.1f}x the memory; from `ru_maxrss`: {mem['ru_ratio']:.3f})."
    )
    L.append("")
    L.append("### Targets")
    L.append("")
    L.append("| target | measured | result |")
    L.append("|---|---:|---|")
    for t in res["targets"]:
        L.append(f"| {t['label']} | {t['value']} | {'PASS' if t['ok'] else 'MISS: ' + t['miss']} |")
    L.append("")
    L.append("### Sweep: LMM `X @ w` speed-up by tuple ratio (rows) and feature ratio (columns)")
    L.append("")
    L.append(
        f"Fact {sweep['fact_rows']:,} rows x {SWEEP_FACT_FEATURES} floats, one dimension of fact rows / TR rows "
        f"x round({SWEEP_FACT_FEATURES} * FR) floats, random foreign keys; built directly with "
        "`Block`/`NormalizedMatrix` (no DuckDB); baseline `T = np.asfortranarray(X.materialize())` "
        "(the layout of the DuckDB-materialized matrix, faster than C order for `T @ w` here). "
        f"{cfg['sweep_rounds']} passes over the whole grid; in each, the median of >= {cfg['sweep_min_repeats']} "
        f"interleaved repeats (more until each side has run {cfg['sweep_min_seconds']:g} s); each side's time is "
        "its best pass (this VM's BLAS calls sometimes fall into a slow state that lasts a few hundred ms and "
        "adds ~8 ms to every call, on both sides). Cells: materialized / factorized time; "
        "< 1 (in italics) means the normalized matrix loses."
    )
    L.append("")
    L.append("| TR \\ FR | " + " | ".join(f"{fr:g}" for fr in SWEEP_FEATURE_RATIOS) + " |")
    L.append("|---:|" + "---:|" * len(SWEEP_FEATURE_RATIOS))
    for tr in SWEEP_TUPLE_RATIOS:
        cells = []
        for fr in SWEEP_FEATURE_RATIOS:
            s = sweep["grid"][str(tr)][str(fr)]
            cells.append(f"*{s:.2f}*" if s < 1 else f"{s:.2f}")
        L.append(f"| {tr} | " + " | ".join(cells) + " |")
    L.append("")
    L.append("Where factorized stops winning (speed-up < 1):")
    L.append("")
    L += [f"- {line}" for line in sweep_summary(sweep)]
    return "\n".join(L) + "\n"


def print_report(res: dict, log: Callable) -> None:
    main, mem = res["main"], res["memory"]
    log("")
    log(f"== main case (TR {res['tuple_ratio']:g}, FR {res['feature_ratio']:g}), medians ==")
    log(f"{'operation':<52} {'factorized':>12} {'materialized':>13} {'speed-up':>9} {'of bytes':>9}")
    for r in main["rows"]:
        label, s = r["label"].replace("`", ""), r["mat"] / r["fact"]
        share = f"{s / r['byte_ratio']:>8.0%}" if "byte_ratio" in r else ""
        log(f"{label:<52} {r['fact'] * 1e3:>9.1f} ms {r['mat'] * 1e3:>10.1f} ms {s:>8.2f}x {share}")
    log(
        f"materialized build = join->Arrow {main['arrow_s'] * 1e3:.0f} ms + Arrow->NumPy {main['numpy_s'] * 1e3:.0f} ms"
    )
    log("")
    log("== peak memory of the build (fresh subprocesses) ==")
    for kind in ("factorized", "materialized"):
        m = mem[kind]
        log(
            f"{kind:<13} peak +{m['delta'] / 2**20:7.0f} MiB ({m['source']})"
            f"  ru_maxrss +{m['ru_delta'] / 2**20:6.0f} MiB"
            f"  retained +{m['retained'] / 2**20:6.0f} MiB  result {m['result'] / 2**20:6.0f} MiB"
        )
    log(f"ratio factorized/materialized: {mem['ratio']:.3f} (ru_maxrss: {mem['ru_ratio']:.3f})")
    log("")
    log("== targets ==")
    for t in res["targets"]:
        log(
            f"{'PASS' if t['ok'] else 'MISS'}  {t['label'].replace('`', '')}: {t['value']}"
            + ("" if t["ok"] else f"  ({t['miss']})")
        )
    log("")
    log("== sweep: LMM X @ w speed-up (rows: tuple ratio, columns: feature ratio) ==")
    log("TR\\FR " + "".join(f"{fr:>8g}" for fr in SWEEP_FEATURE_RATIOS))
    for tr in SWEEP_TUPLE_RATIOS:
        log(f"{tr:>5} " + "".join(f"{res['sweep']['grid'][str(tr)][str(fr)]:>8.2f}" for fr in SWEEP_FEATURE_RATIOS))
    for line in sweep_summary(res["sweep"]):
        log("  " + line)


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__, quick="smaller sizes (fact 100k rows, dims 5k): a smoke run", child=3)
    args_parser.add_argument("--json", type=Path, help="also dump all measurements as JSON")
    args_parser.add_argument(
        "--blas-threads",
        type=int,
        help="limit BLAS to this many threads (threadpoolctl); default: BLAS's own choice, as users get it",
    )
    args = args_parser.parse_args(argv)
    if args.child:
        kind, db, sizes = args.child
        peak_child(kind, db, json.loads(sizes))
        return 0

    config = QUICK if args.quick else FULL
    limiter = None
    if args.blas_threads:
        from threadpoolctl import threadpool_limits

        limiter = threadpool_limits(args.blas_threads, user_api="blas")  # noqa: F841 - held for the whole run
    started, machine = time.perf_counter(), OtherProcesses()

    def log(msg: str = "") -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}" if msg else "", flush=True)

    if machine.load > 0.5:
        log(f"warning: load average {machine.load:.2f} before the run; other work on this machine skews the timings")

    tmp = tempfile.mkdtemp(prefix="ilargi_bench_")
    try:
        db = os.path.join(tmp, "star.duckdb")
        log(f"generating the star schema into {db}: {config.schema_kwargs()}")
        writer = ilargi_db.connect(db)
        schema = make_star_schema(writer, seed=0, **config.schema_kwargs())
        writer.close()
        log(f"tuple ratio {schema.tuple_ratio:g}, feature ratio {schema.feature_ratio:g}")

        # First, while this process is still small (a child's ru_maxrss includes it).
        log("peak memory: one fresh subprocess per build")
        memory = {kind: measure_peak(kind, db, config) for kind in ("factorized", "materialized")}
        memory["ratio"] = memory["factorized"]["delta"] / memory["materialized"]["delta"]
        memory["ru_ratio"] = memory["factorized"]["ru_delta"] / max(1, memory["materialized"]["ru_delta"])
        for kind in ("factorized", "materialized"):
            m = memory[kind]
            log(f"  {kind}: +{m['delta'] / 2**20:.0f} MiB ({m['source']}), ru_maxrss +{m['ru_delta'] / 2**20:.0f} MiB")

        con = ilargi_db.connect(db, read_only=True)
        main_res = run_main(con, schema, config, log)
        facts = machine_facts(con)
        con.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    log(
        f"sweep: {len(SWEEP_TUPLE_RATIOS)} tuple ratios x {len(SWEEP_FEATURE_RATIOS)} feature ratios, "
        f"fact {config.sweep_fact_rows:,} rows"
    )
    sweep = run_sweep(config, log)

    res = dict(
        config=asdict(config),
        tuple_ratio=schema.tuple_ratio,
        feature_ratio=schema.feature_ratio,
        main=main_res,
        memory=memory,
        sweep=sweep,
        facts=facts,
        steal=machine.steal_share(),
        load=(machine.load, os.getloadavg()[0]),
        others=machine.share(),  # share of the machine's CPU time used by other processes
        seconds=time.perf_counter() - started,
        date=now(),
        command=command(__file__, argv),
    )
    res["targets"] = targets(main_res, memory)
    print_report(res, log)
    log(f"other processes used {res['others']:.1%} of the CPU time during the run; steal {res['steal']:.1%}")
    if res["others"] > 0.05:
        log("warning: other processes competed for the CPU during this run; its timings are suspect")
    if args.output:
        write_section(args.output, "bench_normalized_matrix", render_markdown(res))
        log(f"wrote {args.output}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
