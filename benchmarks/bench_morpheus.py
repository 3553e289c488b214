#!/usr/bin/env python
"""The normalized matrix's operators against MorpheusPy's, on MorpheusPy's own Hamlet matrices.

MorpheusPy (Li and Kumar's Python port of Morpheus) is Python 2 code with a C extension: it runs in its
own Python 2.7 with NumPy/SciPy, beside this process, on the files it ships (examples/data: the fact's
foreign keys MLFK*.csv, the dimension tables MLR*Sparse.txt, the fact's own columns MLS*). Nothing of
it is imported here: a small driver (``DRIVER`` below) times its operators in that interpreter and
prints JSON. Run from the repository root::

    python benchmarks/bench_morpheus.py --morpheus /path/to/MorpheusPy --python2 /path/to/python2.7
    python benchmarks/bench_morpheus.py ... --output docs/benchmarks.md

``--morpheus`` is a MorpheusPy checkout whose extension is built (``python2.7 setup.py build_ext
--inplace`` there); ``--python2-path`` adds folders (its NumPy and SciPy) to that interpreter's path.
Each operator is timed in a block of calls on each side (one untimed call first), the sides alternating
``--rounds`` times; a side's time is the median of its rounds. Both sides multiply the same operands
(``numpy.random.RandomState(0)``) and the sums of their results are checked to agree.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse

from ilargi_db import Block, NormalizedMatrix

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.machine import OtherProcesses  # noqa: E402
from harness.report import now, write_section  # noqa: E402

DATASETS = ("Walmart", "Yelp", "LastFM", "BookCrossing", "Flights", "Expedia", "MovieLens1M")
WIDTH = 8  # columns of W in X @ W
CROSSPROD_MAX_COLUMNS = 4096  # crossprod returns a dense d x d array: 128 MiB at this width
OPERATORS = (
    ("lmm", "`X @ w`"),
    ("tlmm", "`X.T @ v`"),
    ("lmm_matrix", f"`X @ W` ({WIDTH} columns)"),
    ("crossprod", "crossprod `X.T @ X`"),
)
TARGET = 2.0

# Runs in MorpheusPy's Python 2.7: loads a data set as its examples do and times its operators.
DRIVER = r"""
import json, sys, time
import numpy as np
from scipy.io import mmread
import morpheus.normalized_matrix as nm

folder, config = sys.argv[1], json.loads(sys.argv[2])
keys, tables = [], []
i = 1
while True:
    try:
        keys.append(np.genfromtxt('%s/MLFK%d.csv' % (folder, i), skip_header=True, dtype=int) - 1)
    except IOError:
        break
    tables.append(mmread('%s/MLR%dSparse.txt' % (folder, i)))
    i += 1
try:
    # float, not its examples' int: its C loops read the fact's columns as doubles (crossprod is wrong on ints)
    s = np.matrix(np.genfromtxt(folder + '/MLSraw.txt', skip_header=True, dtype=float)).T
except IOError:
    try:
        s = mmread(folder + '/MLSSparse.txt')
    except IOError:
        s = np.matrix([])
X = nm.NormalizedMatrix(s, tables, keys)
n, d = len(keys[0]), s.shape[1] + sum(t.shape[1] for t in tables)
rng = np.random.RandomState(0)
w, v, W = rng.standard_normal(d), rng.standard_normal(n), rng.standard_normal((d, config['width']))
ops = {
    'lmm': lambda: X * np.matrix(w).T,
    'tlmm': lambda: X.T * np.matrix(v).T,
    'lmm_matrix': lambda: X * np.matrix(W),
    'crossprod': lambda: X.T * X,
}
out = {}
for name in config['operators']:
    f = ops[name]
    result = f()
    checksum = float(result.sum())
    seconds = []
    while len(seconds) < config['repeats'] or sum(seconds) < config['min_seconds']:
        began = time.time()
        f()
        seconds.append(time.time() - began)
        if len(seconds) >= 10 * config['repeats']:
            break
    out[name] = [sorted(seconds)[len(seconds) // 2], checksum]
print(json.dumps(out))
"""


def load(folder: Path) -> NormalizedMatrix:
    """A data set as MorpheusPy's examples load it, as this package's normalized matrix."""
    blocks, column = [], 0
    raw, sparse = folder / "MLSraw.txt", folder / "MLSSparse.txt"
    fact = None
    if raw.exists():
        fact = np.genfromtxt(raw, skip_header=True, dtype=float).reshape(-1, 1)
    elif sparse.exists():
        fact = scipy.io.mmread(sparse).tocsr().astype(float)
    if fact is not None:
        blocks.append(Block(fact, columns=range(fact.shape[1])))
        column = fact.shape[1]
    i = 1
    while (folder / f"MLFK{i}.csv").exists():
        keys = np.genfromtxt(folder / f"MLFK{i}.csv", skip_header=True, dtype=np.int64) - 1
        table = scipy.io.mmread(folder / f"MLR{i}Sparse.txt").tocsr().astype(float)
        blocks.append(Block(table, columns=range(column, column + table.shape[1]), index=keys))
        column += table.shape[1]
        n = len(keys)
        i += 1
    return NormalizedMatrix(blocks, n_rows=n, backend="numpy")


def our_operators(X: NormalizedMatrix) -> dict[str, Callable[[], object]]:
    n, d = X.shape
    rng = np.random.RandomState(0)  # the operands MorpheusPy's side draws
    w, v, W = rng.standard_normal(d), rng.standard_normal(n), rng.standard_normal((d, WIDTH))

    def crossprod() -> np.ndarray:
        X.memo.clear()  # computed each time, not the memoized sum
        return X.crossprod()

    return {"lmm": lambda: X @ w, "tlmm": lambda: X.T @ v, "lmm_matrix": lambda: X @ W, "crossprod": crossprod}


def time_block(f: Callable[[], object], repeats: int, min_seconds: float) -> tuple[float, float]:
    """(median seconds, sum of the result) of a block of calls after one untimed call."""
    result = f()
    checksum = float(result.sum())
    del result
    seconds: list[float] = []
    while len(seconds) < repeats or sum(seconds) < min_seconds:
        began = time.perf_counter()
        f()
        seconds.append(time.perf_counter() - began)
        if len(seconds) >= 10 * repeats:
            break
    return statistics.median(seconds), checksum


def run_morpheus(args, folder: Path, operators: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*args.python2_path, str(args.morpheus)]))
    env.pop("PYTHONHOME", None)
    config = dict(width=WIDTH, operators=operators, repeats=args.repeats, min_seconds=args.min_seconds)
    done = subprocess.run(
        [args.python2, "-c", DRIVER, str(folder), json.dumps(config)],
        env=env,
        capture_output=True,
        text=True,
        cwd=args.morpheus,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"MorpheusPy's driver failed on {folder.name}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(args, log: Callable[[str], None]) -> list[dict]:
    rows = []
    for name in DATASETS:
        folder = args.morpheus / "examples" / "data" / name
        if not (folder / "MLFK1.csv").exists() or not (folder / "MLR1Sparse.txt").exists():
            log(f"{name}: not in this MorpheusPy checkout (its large files absent); skipped")
            continue
        try:
            X = load(folder)
        except (OSError, ValueError) as err:  # a file stored as a pointer, not its data
            log(f"{name}: cannot be read ({err}); skipped")
            continue
        n, d = X.shape
        operators = [op for op, _ in OPERATORS if op != "crossprod" or d <= CROSSPROD_MAX_COLUMNS]
        ours_f = our_operators(X)
        ours: dict[str, list] = {op: [] for op in operators}
        theirs: dict[str, list] = {op: [] for op in operators}
        for _ in range(args.rounds):
            for op, (seconds, checksum) in run_morpheus(args, folder, operators).items():
                theirs[op].append((seconds, checksum))
            for op in operators:
                ours[op].append(time_block(ours_f[op], args.repeats, args.min_seconds))
        for op in operators:
            mine, other = ours[op][0][1], theirs[op][0][1]
            if not np.isclose(mine, other, rtol=1e-6, atol=1e-6 * max(1.0, abs(other))):
                raise RuntimeError(f"{name} {op}: result sums differ ({mine!r} vs MorpheusPy's {other!r})")
            row = dict(
                dataset=name,
                shape=(n, d),
                blocks=repr(X),
                op=op,
                ours=statistics.median(s for s, _ in ours[op]),
                morpheus=statistics.median(s for s, _ in theirs[op]),
            )
            rows.append(row)
            log(
                f"{name:<13} {op:<11} ours {row['ours'] * 1e3:8.2f} ms  MorpheusPy {row['morpheus'] * 1e3:8.2f} ms"
                f"  {row['morpheus'] / row['ours']:6.2f}x"
            )
    return rows


def render_markdown(res: dict) -> str:
    L = ["## Operators against MorpheusPy on its Hamlet matrices (`benchmarks/bench_morpheus.py`)", ""]
    L.append(f"Generated by the script on {res['date']} ({res['seconds']:.0f} s wall time). Command:")
    L += ["", "```", res["command"], "```", ""]
    L.append(
        "MorpheusPy (git "
        f"{res['morpheus_git']}) runs unchanged in Python {res['python2_version']} with NumPy "
        f"{res['python2_numpy']} / SciPy {res['python2_scipy']}, in its own process, on the matrices it "
        "ships (fact keys, sparse one-hot dimension tables, the fact's own columns); this package builds its "
        "normalized matrix from the same files. Each operator: a block of calls per side (one untimed first), "
        f"at least {res['repeats']} calls and {res['min_seconds']:g} s, sides alternating {res['rounds']} "
        "times, the median of each side's rounds; the sums of both sides' results agree. MorpheusPy's "
        "products are SciPy sparse (one thread) and its C loops (one thread); ours are fused numba kernels "
        "on every core. crossprod only where its dense d x d result is at most "
        f"{CROSSPROD_MAX_COLUMNS} columns (MorpheusPy returns a sparse one); other processes used "
        f"{res['others']:.1%} of the CPU during the run."
    )
    L += [
        "",
        "| data set | n x d | operator | ours (ms) | MorpheusPy (ms) | speed-up |",
        "|---|---|---|---:|---:|---:|",
    ]
    labels = dict(OPERATORS)
    for r in res["rows"]:
        s = r["morpheus"] / r["ours"]
        L.append(
            f"| {r['dataset']} | {r['shape'][0]:,} x {r['shape'][1]:,} | {labels[r['op']]} | {r['ours'] * 1e3:.2f} "
            f"| {r['morpheus'] * 1e3:.2f} | **{s:.2f}x**{'' if s >= TARGET else ' (< 2x)'} |"
        )
    L += ["", f"Missing data sets (their files are not in the checkout): {', '.join(res['missing']) or 'none'}."]
    return "\n".join(L) + "\n"


def python2_facts(args) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(args.python2_path))
    probe = (
        "import sys, numpy, scipy; "
        "print('%d.%d.%d %s %s' % (sys.version_info[:3] + (numpy.__version__, scipy.__version__)))"
    )
    out = subprocess.run([args.python2, "-c", probe], env=env, capture_output=True, text=True, check=True)
    version, numpy_version, scipy_version = out.stdout.split()
    git = subprocess.run(
        ["git", "-C", str(args.morpheus), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return dict(
        python2_version=version,
        python2_numpy=numpy_version,
        python2_scipy=scipy_version,
        morpheus_git=git.stdout.strip() or "unknown",
    )


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, quick="one round of two calls a side: a smoke run", repeats=5)
    p.add_argument("--morpheus", type=Path, required=True, help="a MorpheusPy checkout with its extension built")
    p.add_argument("--python2", required=True, help="a Python 2.7 interpreter with NumPy and SciPy")
    p.add_argument("--python2-path", action="append", default=[], help="a folder added to its module path")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min-seconds", type=float, default=0.3)
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.repeats, args.min_seconds = 1, 2, 0.0
    started, machine = time.perf_counter(), OtherProcesses()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", flush=True)

    rows = run(args, log)
    res = dict(
        rows=rows,
        missing=[d for d in DATASETS if d not in {r["dataset"] for r in rows}],
        rounds=args.rounds,
        repeats=args.repeats,
        min_seconds=args.min_seconds,
        others=machine.share(),
        seconds=time.perf_counter() - started,
        date=now(),
        command=command(__file__, argv),
        **python2_facts(args),
    )
    markdown = render_markdown(res)
    print(markdown)
    if args.output:
        write_section(args.output, "bench_morpheus", markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
