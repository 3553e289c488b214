"""Wide categorical training: ilargi_train in SQL against DuckDB join + sparse one-hot + scikit-learn.

Star schemas shaped like the Hamlet datasets (``ilargi_db.datasets.make_hamlet_schema``:
thousands to tens of thousands of one-hot columns, most of them dimension keys), per
shape and algorithm (linear and logistic regression, k-means, Gaussian NMF):

- ilargi:   ``SELECT ilargi_train('m', algorithm, query, target, options)`` on a connection
            from ``ilargi_db.connect`` on the DuckDB file (strategy chosen by ilargi unless
            ``--strategy``); its time includes the training metrics and saving the model.
- baseline: ``con.sql(query).to_arrow_table().to_pandas()``, a ``ColumnTransformer`` with
            ``OneHotEncoder(sparse_output=True, handle_unknown="ignore")`` per categorical column
            (numeric columns passed through, query order) and scikit-learn's LinearRegression,
            LogisticRegression (same C, max_iter), KMeans (same k, n_init=1, k-means++, same seed
            and iterations) or NMF (init="random", solver="mu", beta_loss="frobenius", same seed and
            iterations: the same start as ilargi's GaussianNMF, whose updates follow scikit-learn's).
            Timed from the query to the fitted model; the quality is computed after the clock stops.

Every run is a fresh subprocess (imports and a tiny warm-up run done before the clock starts)
with its peak memory (VmHWM, reset just before the run, less the RSS then), a time limit
(``--timeout``; reported as "timeout") and an address-space limit (``--memory-limit``; an
allocation beyond it is a MemoryError, reported, not fatal).

    python benchmarks/bench_wide.py --output docs/benchmarks.md
    python benchmarks/bench_wide.py --shapes walmart,yelp --scale 0.5 --algorithms kmeans,gnmf
    python benchmarks/bench_wide.py --scale walmart=1,expedia=0.1 --timeout 300
    python benchmarks/bench_wide.py --quick                               # a smoke run, seconds
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.machine import OtherProcesses, machine_facts  # noqa: E402
from harness.processes import FreshRunFailed, peak_from_now, run_child  # noqa: E402
from harness.report import ran, write_section  # noqa: E402
from harness.workloads import baseline_model  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.cost_model.choose import STRATEGIES  # noqa: E402
from ilargi_db.datasets import HAMLET_SHAPES, HamletSchema, make_hamlet_schema  # noqa: E402
from ilargi_db.models.catalog import EXTRA_SOLVERS, MATRIX_ALGORITHMS, SUPERVISED, algorithm_facts  # noqa: E402

DEFAULT_SHAPES = ("walmart", "expedia", "yelp")
DEFAULT_SCALE = {"walmart": 1.0, "expedia": 1.0, "yelp": 1.0}  # the published sizes: about 15 minutes on 2 cores
QUICK = {"shapes": ("walmart", "flights"), "scale": 0.01}
TARGET_SPEEDUP = 3.0
TARGET_MEMORY = 0.5
TARGET_QUALITY = 1e-3  # R2 / accuracy: ilargi at most this much below the baseline
TARGET_INERTIA = 1.01  # k-means: ilargi's inertia at most 1% above the baseline's
METHODS = ("ilargi", "baseline")
# What a caller may name as linear regression's solver: "auto", the plans' solvers and the others.
LINEAR_SOLVERS = (
    "auto",
    *(s.name for s in (*algorithm_facts("linear_regression").solvers, *EXTRA_SOLVERS["linear_regression"])),
)
# The training metric compared, as ilargi_train's summary names it.
QUALITY_METRIC = {
    "linear_regression": "r2",
    "logistic_regression": "accuracy",
    "kmeans": "inertia",
    "gnmf": "reconstruction_error",
}
# The algorithms compared: those of the matrix with a scikit-learn baseline here (LinearSVC's has none yet).
ALGORITHMS = tuple(a for a in MATRIX_ALGORITHMS if a in QUALITY_METRIC)


# -- the jobs -----------------------------------------------------------------------------------


def parameters(algorithm: str, clusters: int = 8, components: int = 5, iterations: int = 50) -> dict:
    """The parameters both methods get (scikit-learn's names; ilargi's estimators use the same)."""
    return {
        "linear_regression": {},
        "logistic_regression": {"C": 1.0, "max_iter": 100},
        "kmeans": {"n_clusters": clusters, "n_init": 1, "max_iter": iterations, "tol": 1e-4, "random_state": 0},
        "gnmf": {"n_components": components, "max_iter": iterations, "tol": 0.0, "random_state": 0},
    }[algorithm]


def make_job(schema: HamletSchema, algorithm: str, **kw) -> dict:
    """Everything a run needs, as JSON-able values."""
    target = {"linear_regression": schema.target, "logistic_regression": schema.label}.get(algorithm)
    return {
        "shape": schema.shape.name,
        "algorithm": algorithm,
        "query": schema.query(target),
        "target": target,
        "categorical": list(schema.categorical),
        "width": schema.onehot_width,
        "rows": schema.fact_rows,
        "params": parameters(algorithm, **kw),
    }


def sql_string(text: str | None) -> str:
    return "NULL" if text is None else "'" + text.replace("'", "''") + "'"


def ilargi_call(job: dict, name: str, options: dict) -> str:
    return (
        f"SELECT ilargi_train({sql_string(name)}, {sql_string(job['algorithm'])}, {sql_string(job['query'])}, "
        f"{sql_string(job['target'])}, {sql_string(json.dumps(options))})"
    )


def run_ilargi(con, job: dict, options: dict | None = None) -> dict:
    """Train through SQL; seconds from the call to its JSON answer, and the quality it reports."""
    options = {**job["params"], **(options or {})}
    name = f"bench_{job['shape']}_{job['algorithm']}"
    start = time.perf_counter()
    (answer,) = con.sql(ilargi_call(job, name, options)).fetchall()[0]
    seconds = time.perf_counter() - start
    summary = json.loads(answer)
    quality = summary["metrics"][QUALITY_METRIC[job["algorithm"]]]
    split = summary["seconds"]
    return {
        "seconds": seconds,
        "quality": quality,
        "strategy": summary["strategy"],
        "features": summary["columns"],
        "split": {k: split[k] for k in ("planning", "data", "training", "total")},
    }


def run_baseline(con, job: dict) -> dict:
    """What a data scientist writes today: the join in DuckDB, pandas, sparse one-hot, scikit-learn."""
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import OneHotEncoder

    model = baseline_model(job["algorithm"], job["params"])
    start = time.perf_counter()
    frame = con.sql(job["query"]).to_arrow_table().to_pandas()
    y = frame.pop(job["target"]).to_numpy() if job["target"] else None
    categorical = set(job["categorical"])
    encoder = ColumnTransformer(
        [
            (c, OneHotEncoder(sparse_output=True, handle_unknown="ignore"), [c])
            if c in categorical
            else (c, "passthrough", [c])
            for c in frame.columns
        ],
        sparse_threshold=1.0,
    )
    X = encoder.fit_transform(frame)
    del frame
    model.fit(X, y) if y is not None else model.fit(X)
    seconds = time.perf_counter() - start
    quality = {
        "linear_regression": lambda: model.score(X, y),
        "logistic_regression": lambda: model.score(X, y),
        "kmeans": lambda: model.inertia_,
        "gnmf": lambda: model.reconstruction_err_,
    }[job["algorithm"]]()
    return {"seconds": seconds, "quality": float(quality), "features": int(X.shape[1])}


# -- one run per process ------------------------------------------------------------------------


def child(db: str, method: str, job: dict, options: dict, memory_limit: float) -> None:
    """One run in a fresh process: print one JSON line (seconds, peak bytes, quality, or the error)."""
    if memory_limit > 0:
        limit = int(memory_limit * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    warnings.simplefilter("ignore")  # ConvergenceWarning at max_iter, by design
    import duckdb

    warm = {
        **job,
        "query": f"SELECT * FROM bench_warm_{job['algorithm']}",
        "target": "y" if job["target"] else None,
        "categorical": ["c"],
        "shape": "warm",
    }
    if method == "ilargi":
        con = ilargi_db.connect(db)
        run_ilargi(con, warm, options)  # lazy imports and first-call caches, before the clock
    else:
        con = duckdb.connect(db, read_only=True)
        run_baseline(con, warm)
    con.sql("SELECT 1").fetchall()
    peak = peak_from_now()
    try:
        result = run_ilargi(con, job, options) if method == "ilargi" else run_baseline(con, job)
    except duckdb.OutOfMemoryException as err:
        result = {"error": f"DuckDB out of memory: {str(err).splitlines()[0][:120]}"}
    except Exception as err:  # MemoryError included (raised inside the UDF, it reaches here as a DuckDB error)
        result = {"error": describe_error(err)}
    result["peak"] = peak()
    print(json.dumps(result))


def describe_error(err: BaseException) -> str:
    """A short cell for the table: ``MemoryError: 23.0 GiB for a (55606, 55606) array`` and the like."""
    text = str(err)
    found = re.search(r"Unable to allocate ([\d.]+ \w+) for an array with shape (\([^)]*\))", text)
    if found:
        return f"MemoryError: {found[1]} for a {found[2]} array"
    if isinstance(err, MemoryError) or "MemoryError" in text:
        return "MemoryError"
    return f"{type(err).__name__}: {text.splitlines()[0][:120]}" if text else type(err).__name__


def run(db: str, method: str, job: dict, options: dict, timeout: float, memory_limit: float) -> dict:
    """``child`` in a fresh process; a timeout, a crash or a kill becomes ``{"error": ...}``."""
    args = (db, method, json.dumps(job), json.dumps(options), str(memory_limit))
    start = time.perf_counter()
    try:
        found = run_child(__file__, *args, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout ({timeout:.0f} s)", "wall": time.perf_counter() - start}
    except FreshRunFailed as failed:
        tail = failed.stderr.strip().splitlines()[-1:] or [""]
        why = f"killed by signal {-failed.returncode}" if failed.returncode < 0 else f"exit {failed.returncode}"
        if "MemoryError" in failed.stderr:
            why = "MemoryError"
        return {"error": f"{why}: {tail[0][:160]}", "wall": time.perf_counter() - start}
    return {**found, "wall": time.perf_counter() - start}


def create_warmup_tables(con) -> None:
    """Tiny tables for the warm-up run of each algorithm (same column kinds as the jobs)."""
    base = "SELECT ['a', 'b', 'c'][range % 3 + 1] AS c, (range % 7) * 0.5 AS x"
    con.execute(f"CREATE OR REPLACE TABLE bench_warm_linear_regression AS {base}, range * 0.1 AS y FROM range(50)")
    con.execute(f"CREATE OR REPLACE TABLE bench_warm_logistic_regression AS {base}, range % 2 AS y FROM range(50)")
    for algorithm in ("kmeans", "gnmf"):
        con.execute(f"CREATE OR REPLACE TABLE bench_warm_{algorithm} AS {base} FROM range(50)")


# -- verdicts and the report --------------------------------------------------------------------


def assess(algorithm: str, ilargi: dict, baseline: dict) -> dict:
    """Speed-up, memory ratio, quality comparison and the issue's targets for one (shape, algorithm)."""
    out: dict = {"speedup": None, "memory": None, "quality": None, "targets": {}}
    if "error" in ilargi or "error" in baseline:  # the error itself is in the seconds cell
        verdict = "missed" if "error" in ilargi else "n/a"
        out["targets"] = dict.fromkeys(
            ("speed", "memory", "quality") if algorithm != "gnmf" else ("speed", "memory"), verdict
        )
        return out
    out["speedup"] = baseline["seconds"] / ilargi["seconds"]
    out["memory"] = ilargi["peak"] / max(baseline["peak"], 1)
    mine, theirs = ilargi["quality"], baseline["quality"]
    t = out["targets"]
    t["speed"] = "met" if out["speedup"] >= TARGET_SPEEDUP else "missed"
    t["memory"] = "met" if out["memory"] <= TARGET_MEMORY else "missed"
    if algorithm in SUPERVISED:
        out["quality"] = mine - theirs
        t["quality"] = "met" if out["quality"] >= -TARGET_QUALITY else "missed"
    elif algorithm == "kmeans":
        out["quality"] = mine / theirs if theirs else float("nan")
        t["quality"] = "met" if out["quality"] <= TARGET_INERTIA else "missed"
    else:
        out["quality"] = mine / theirs if theirs else float("nan")  # no target in the issue: reported only
    return out


QUALITY_NAME = {
    "linear_regression": "R2",
    "logistic_regression": "accuracy",
    "kmeans": "inertia",
    "gnmf": "reconstruction error",
}


def _quality_cells(algorithm: str, r: dict) -> tuple[str, str]:
    """(both values, difference or ratio) for the table."""
    i, b = r["ilargi"], r["baseline"]
    fmt = (lambda v: f"{v:.4f}") if algorithm in SUPERVISED else (lambda v: f"{v:.4g}")
    values = " / ".join(fmt(x["quality"]) if "quality" in x else "—" for x in (i, b))
    q = r["assessment"]["quality"]
    if q is None:
        return values, "—"
    if algorithm in SUPERVISED:
        return values, f"{q:+.4f}"
    return values, f"{q:.3f}x"


def _cell_seconds(x: dict) -> str:
    return f"{x['seconds']:.2f}" if "seconds" in x else x["error"]


def _cell_peak(x: dict) -> str:
    return f"{x['peak'] / 2**20:.0f}" if "peak" in x and "error" not in x else "—"


def render(results: list[dict], setup: dict) -> str:
    facts = setup["facts"]
    lines = [
        "## Wide categorical training, Hamlet shapes (`benchmarks/bench_wide.py`)",
        "",
        ran(setup["command"], setup["seconds"], f"generating the tables took {setup['generate_seconds']:.1f} s") + ".",
        "",
        f"**Machine.** {facts.get('cpu', '?')}, {facts['cpus']} cores ({facts['usable_cpus']} usable), "
        f"{facts.get('memory', '?')} RAM, {facts['platform']}. Python {facts['python']}, NumPy {facts['numpy']} "
        f"(BLAS at run time: {facts['blas_runtime']}), DuckDB {facts['duckdb']} ({facts['duckdb_threads']} threads), "
        f"SciPy {facts.get('scipy', '?')}, scikit-learn {setup['sklearn']}, ilargi_db {facts['ilargi_db']} at git "
        f"{facts['git']}. Other processes used {setup['others']:.0%} of the machine's CPU time during the run "
        f"(1-minute load average {setup['load'][0]:.2f} before, {setup['load'][1]:.2f} after): a shared machine, "
        "so the timings are noisy.",
        "",
        "Data: `make_hamlet_schema(con, shape, scale)` (fact rows and one-hot widths of the Hamlet datasets at "
        "scale 1; scale multiplies the rows). Each run is a fresh process; seconds from the SQL call (ilargi: "
        "`SELECT ilargi_train(...)`, training metrics and the saved model included) or from the query (baseline: "
        "DuckDB -> Arrow -> pandas -> sparse `OneHotEncoder` -> scikit-learn) to the fitted model; peak = VmHWM "
        f"over the RSS before the run. Limits per run: {setup['timeout']:.0f} s, {setup['memory_limit']:g} GiB of "
        "address space. Parameters: logistic C=1, max_iter=100; k-means "
        f"{setup['clusters']} clusters, n_init=1, k-means++, max_iter={setup['iterations']}, tol=1e-4; NMF "
        f"{setup['components']} components, random init, {setup['iterations']} iterations (tol=0); linear "
        f"regression: each library's default{setup['linear_note']}. Quality: training R2 / accuracy (difference "
        "ilargi - baseline), k-means inertia and NMF reconstruction error (ratio ilargi / baseline).",
        "",
        "| shape | rows | one-hot width | algorithm | ilargi s (strategy) | baseline s | speed-up | "
        "peak MiB ilargi / baseline | memory ratio | quality ilargi / baseline | diff. or ratio | targets |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in results:
        a, i, b = r["assessment"], r["ilargi"], r["baseline"]
        values, diff = _quality_cells(r["algorithm"], r)
        strategy = f" ({i['strategy']})" if "strategy" in i else ""
        speed = f"{a['speedup']:.2f}x" if a["speedup"] is not None else "—"
        memory = f"{a['memory']:.2f}" if a["memory"] is not None else "—"
        targets = ", ".join(f"{k} {v}" for k, v in a["targets"].items())
        lines.append(
            f"| {r['shape']} | {r['rows']:,} | {r['width']:,} | {r['algorithm']} | {_cell_seconds(i)}{strategy} | "
            f"{_cell_seconds(b)} | {speed} | {_cell_peak(i)} / {_cell_peak(b)} | {memory} | "
            f"{values} ({QUALITY_NAME[r['algorithm']]}) | {diff} | {targets} |"
        )
    met = [v for r in results for v in r["assessment"]["targets"].values()]
    lines += [
        "",
        f"Targets (issue 10): >= {TARGET_SPEEDUP:g}x faster, peak memory <= {TARGET_MEMORY:g} of the baseline's, "
        f"R2 / accuracy not more than {TARGET_QUALITY:g} below the baseline's, k-means inertia within "
        f"{TARGET_INERTIA - 1:.0%} (no target for NMF). Met {sum(v == 'met' for v in met)} of {len(met)}.",
        "",
        "Where ilargi's seconds go (from `ilargi_train`'s summary; the rest is the training metrics, saving the "
        "model with its category weights and macros, and the SQL call):",
        "",
        "| shape | algorithm | planning | data | training | rest |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        split = r["ilargi"].get("split")
        if split:
            rest = split["total"] - split["planning"] - split["data"] - split["training"]
            lines.append(
                f"| {r['shape']} | {r['algorithm']} | {split['planning']:.2f} | {split['data']:.2f} | "
                f"{split['training']:.2f} | {rest:.2f} |"
            )
    return "\n".join(lines) + "\n"


def print_row(r: dict) -> None:
    a, i, b = r["assessment"], r["ilargi"], r["baseline"]
    values, diff = _quality_cells(r["algorithm"], r)
    speed = f"{a['speedup']:.2f}x" if a["speedup"] is not None else "-"
    print(
        f"{r['shape']:13s} {r['algorithm']:20s} ilargi {_cell_seconds(i):>8s} {i.get('strategy', ''):12s} "
        f"baseline {_cell_seconds(b):>8s}  speed-up {speed:>6s}  peak MiB {_cell_peak(i)}/{_cell_peak(b)}  "
        f"{QUALITY_NAME[r['algorithm']]} {values} ({diff})  " + ", ".join(f"{k} {v}" for k, v in a["targets"].items()),
        flush=True,
    )


# -- main ---------------------------------------------------------------------------------------


def parse_scale(text: str | None, shapes: list[str], default: dict | float) -> dict[str, float]:
    """``0.5`` (every shape) or ``walmart=1,yelp=0.5`` (others keep their default)."""
    scales = {s: default if isinstance(default, float) else default.get(s, 0.1) for s in shapes}
    if not text:
        return scales
    if "=" not in text:
        return dict.fromkeys(shapes, float(text))
    for part in text.split(","):
        shape, value = part.split("=")
        scales[shape.strip()] = float(value)
    return scales


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__, quick="tiny tables (walmart and flights at scale 0.01)", child=5)
    args_parser.add_argument(
        "--shapes", help=f"comma-separated, of {', '.join(HAMLET_SHAPES)} (default: {','.join(DEFAULT_SHAPES)})"
    )
    args_parser.add_argument(
        "--scale",
        help="one scale for every shape, or shape=scale,... (default: "
        + ",".join(f"{k}={v:g}" for k, v in DEFAULT_SCALE.items())
        + ", others 0.1)",
    )
    args_parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help="comma-separated (default: all four)")
    args_parser.add_argument("--strategy", choices=STRATEGIES, default="auto")
    args_parser.add_argument(
        "--linear-solver",
        choices=LINEAR_SOLVERS,
        help="ilargi's linear regression solver (default: its own default, 'auto': chosen by width)",
    )
    args_parser.add_argument("--timeout", type=float, default=600, help="seconds per run (default 600)")
    args_parser.add_argument(
        "--memory-limit", type=float, default=12, help="GiB of address space per run (default 12; 0 for none)"
    )
    args_parser.add_argument("--clusters", type=int, default=8)
    args_parser.add_argument("--components", type=int, default=5)
    args_parser.add_argument("--iterations", type=int, default=50, help="k-means and NMF iterations (default 50)")
    args_parser.add_argument("--seed", type=int, default=0)
    args_parser.add_argument("--db", type=Path, help="DuckDB file to create the tables in (default: a temporary one)")
    args = args_parser.parse_args(argv)
    if args.child:
        db, method, job, options, memory_limit = args.child
        child(db, method, json.loads(job), json.loads(options), float(memory_limit))
        return 0

    shapes = args.shapes.split(",") if args.shapes else list(QUICK["shapes"] if args.quick else DEFAULT_SHAPES)
    unknown = [s for s in shapes if s not in HAMLET_SHAPES]
    algorithms = args.algorithms.split(",")
    if unknown or any(a not in ALGORITHMS for a in algorithms):
        args_parser.error(f"shapes are {', '.join(HAMLET_SHAPES)}; algorithms are {', '.join(ALGORITHMS)}")
    scales = parse_scale(args.scale, shapes, QUICK["scale"] if args.quick else DEFAULT_SCALE)
    options = {"strategy": args.strategy} if args.strategy != "auto" else {}
    linear_options = {**options, "solver": args.linear_solver} if args.linear_solver else options
    knobs = {"clusters": args.clusters, "components": args.components, "iterations": args.iterations}

    started, others = time.perf_counter(), OtherProcesses()
    with tempfile.TemporaryDirectory() as folder:
        db = str(args.db or Path(folder) / "bench_wide.duckdb")
        con = ilargi_db.connect(db)
        schemas = []
        for shape in shapes:
            t = time.perf_counter()
            schemas.append(make_hamlet_schema(con, shape, scale=scales[shape], seed=args.seed))
            s = schemas[-1]
            print(
                f"{shape}: scale {scales[shape]:g}, {s.fact_rows:,} fact rows, dimensions "
                f"{', '.join(f'{d.name} {d.rows:,}' for d in s.shape.dimensions)}, one-hot width "
                f"{s.onehot_width:,} (generated in {time.perf_counter() - t:.1f} s)",
                flush=True,
            )
        generate_seconds = time.perf_counter() - started
        create_warmup_tables(con)
        facts = machine_facts(con)
        con.close()
        results = []
        for schema in schemas:
            for algorithm in algorithms:
                job = make_job(schema, algorithm, **knobs)
                extra = linear_options if algorithm == "linear_regression" else options
                r = {
                    "shape": schema.shape.name,
                    "rows": schema.fact_rows,
                    "width": schema.onehot_width,
                    "algorithm": algorithm,
                    "scale": scales[schema.shape.name],
                }
                for method in METHODS:
                    r[method] = run(db, method, job, extra, args.timeout, args.memory_limit)
                r["assessment"] = assess(algorithm, r["ilargi"], r["baseline"])
                results.append(r)
                print_row(r)
    if args.output:
        import sklearn

        setup = {
            "command": command(__file__, argv),
            "seconds": time.perf_counter() - started,
            "generate_seconds": generate_seconds,
            "facts": facts,
            "sklearn": sklearn.__version__,
            "others": others.share(),
            "load": (others.load, os.getloadavg()[0]),
            "timeout": args.timeout,
            "memory_limit": args.memory_limit,
            "linear_note": f" (ilargi solver={args.linear_solver!r})" if args.linear_solver else "",
            **knobs,
        }
        write_section(args.output, "bench_wide", render(results, setup))
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
