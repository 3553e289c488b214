"""Gradient-boosted trees end to end from SQL: ilargi_db against DuckDB join -> pandas -> LightGBM / XGBoost.

Every side trains the same 100 trees (learning rate 0.1, depth 6, 63 leaves, 20 rows per leaf, 255 bins,
no L2) on the same rows and is scored on the same held-out rows: a fixed hash of the fact's key in SQL
(``hash(key) % 5 = 0`` held out). Each side runs in a fresh process that opens the data set's DuckDB file
read-only; its seconds are the first run's, from the query to the fitted model, and its peak is the
resident memory it adds (VmHWM). Sides:

- ilargi (``factorized``, ``materialized``, ``auto``): ``ilargi_db.train(con, query, target,
  algorithm="gradient_boosting", strategy=...)``, scored by ``ilargi_db.evaluate`` on the held-out query;
  ``quantized``: ``auto`` with ``quantized_gradients=True``.
- ``lightgbm``: ``con.sql(query).to_arrow_table().to_pandas()``, VARCHAR columns as pandas ``category``
  (LightGBM's native categorical splits), ``LGBMRegressor`` / ``LGBMClassifier``; ``lightgbm_quantized``: the
  same with ``use_quantized_grad=True``.
- ``xgboost``: the same frame, ``tree_method="hist"``, ``grow_policy="lossguide"``, ``enable_categorical``.
- ``joinboost`` (Favorita only): JoinBoost's ``GradientBoosting`` in its own virtual environment, on the
  Favorita sample its repository ships (regression; it has no binary objective).

Data sets, written outside the timed region into DuckDB files of a temporary folder:

- ``star``: ``ilargi_db.datasets.make_tree_star`` (1M orders, 3 dimensions, 12 features of which 5 VARCHAR).
- ``tpch``: the TPC-H snowflake (lineitem -> orders -> customer -> nation, part, supplier) when
  ``tpchgen-cli`` is installed (``pip install tpchgen-cli``).
- ``retail``: ``ilargi_db.datasets.write_retail_files`` as Parquet, read through views.
- ``favorita``: JoinBoost's ``data/favorita`` CSV files, with ``--favorita`` (and ``--joinboost-python``
  for the JoinBoost side).

    python benchmarks/bench_trees.py --output docs/benchmarks.md        # several minutes
    python benchmarks/bench_trees.py --quick                            # a smoke run
    python benchmarks/bench_trees.py --backend cupy --output docs/benchmarks.md   # on a machine with a GPU
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.processes import FreshRunFailed, peak_from_now, run_child, run_fresh  # noqa: E402
from harness.report import ran, write_section  # noqa: E402
from harness.workloads import TPCH_FEATURES, TPCH_FROM, TPCH_SIGNED, load_tpch, tpchgen  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.datasets import make_tree_star, write_retail_files  # noqa: E402
from ilargi_db.models.catalog import NAMES as ALGORITHMS  # noqa: E402
from ilargi_db.models.catalog import estimator_class  # noqa: E402

ALGORITHM = "gradient_boosting"
STRATEGIES = ("factorized", "materialized", "auto")
QUANTIZED = "quantized"  # ilargi, strategy auto, quantized_gradients=True
BASELINES = ("lightgbm", "lightgbm_quantized", "xgboost")  # lightgbm_quantized: use_quantized_grad=True
REFERENCE = "lightgbm"  # the side the targets compare with
# Issue 22's targets against DuckDB join + LightGBM.
TARGET_SPEEDUP, TARGET_PEAK, TARGET_SCORE = 2.0, 0.6, 0.005
FOLDS = 5  # one fifth of the fact's rows held out
TIMEOUT, JOINBOOST_TIMEOUT = 600, 1800  # seconds a side may run (JoinBoost: ~5 s a tree of 63 leaves on Favorita)

# The same model on every side, in each library's names.
ILARGI = dict(
    n_estimators=100,
    learning_rate=0.1,
    max_depth=6,
    max_leaves=63,
    min_samples_leaf=20,
    max_bins=255,
    l2_regularization=0.0,
    random_state=0,
)
LIGHTGBM = dict(
    n_estimators=100,
    learning_rate=0.1,
    max_depth=6,
    num_leaves=63,
    min_child_samples=20,
    max_bin=255,
    reg_lambda=0.0,
    subsample=1.0,
    colsample_bytree=1.0,
    random_state=0,
    verbose=-1,
)
XGBOOST = dict(
    tree_method="hist",
    max_depth=6,
    max_leaves=63,
    max_bin=255,
    enable_categorical=True,
    n_estimators=100,
    learning_rate=0.1,
    grow_policy="lossguide",
    reg_lambda=0.0,
    random_state=0,
)
JOINBOOST = dict(num_leaves=63, learning_rate=0.1, max_depth=6, n_estimators=100)
METRIC = {"regression": "r2", "binary": "roc_auc", "multiclass": "accuracy"}

# JoinBoost's Favorita sample: a snowflake, every feature an integer code (as JoinBoost's demo uses them).
FAVORITA_TABLES = {  # table -> (file, features)
    "sales": ("sales_small", []),
    "items": ("items", ["family", "class", "perishable", "f1"]),
    "transactions": ("transactions", ["transactions", "f5"]),
    "stores": ("stores", ["city", "state", "stype", "cluster", "f4"]),
    "holidays": ("holidays", ["htype", "locale", "locale_name", "transferred", "f2"]),
    "oil": ("oil", ["dcoilwtico", "f3"]),
}
FAVORITA_JOINS = [  # (from, to, key in from, key in to): JoinBoost's demo's join graph
    ("sales", "items", "item_nbr", "item_nbr"),
    ("sales", "transactions", "tid", "tid"),
    ("transactions", "stores", "store_nbr", "store_nbr"),
    ("transactions", "holidays", "date", "date"),
    ("holidays", "oil", "date", "date"),
]


def held_out(key: str) -> str:
    """The SQL condition of the held-out rows: a fixed hash of the fact's key, the same for every side."""
    return f"hash({key}) % {FOLDS} = 0"


def split(query: str, key: str) -> tuple[str, str]:
    """The training query and the held-out query of ``query`` (whose WHERE, if any, both keep)."""
    if " WHERE " in query:
        head, condition = query.split(" WHERE ", 1)
        query = f"{head} WHERE ({condition}) AND"
    else:
        query += " WHERE"
    return f"{query} NOT ({held_out(key)})", f"{query} {held_out(key)}"


def job(name: str, db: Path, task: str, query: str, target: str, key: str, **extra) -> dict:
    train, holdout = split(query, key)
    return {"name": name, "db": str(db), "task": task, "train": train, "holdout": holdout, "target": target, **extra}


def star_jobs(folder: Path, rows: int) -> list[dict]:
    db = folder / "star.duckdb"
    with ilargi_db.connect(str(db)) as con:
        star = make_tree_star(con, fact_rows=rows)
        low, high = con.execute("SELECT quantile_cont(y, [1 / 3, 2 / 3]) FROM orders").fetchone()[0]
    name = f"star, {rows:,} orders"
    classes = f"CASE WHEN o.y < {low!r} THEN 0 WHEN o.y < {high!r} THEN 1 ELSE 2 END AS y_class"
    return [
        job(name, db, "regression", star.query("y"), "y", star.key),
        job(name, db, "binary", star.query("label"), "label", star.key),
        job(name, db, "multiclass", star.query("y").replace("o.y FROM", f"{classes} FROM"), "y_class", star.key),
    ]


def tpch_jobs(folder: Path, scale: float) -> list[dict]:
    executable = tpchgen()
    if executable is None:
        print("TPC-H skipped: tpchgen-cli is not installed (pip install tpchgen-cli)", flush=True)
        return []
    db = folder / "tpch.duckdb"
    with ilargi_db.connect(str(db)) as con:
        load_tpch(con, executable, scale, folder / "tpch")
        rows = con.execute("SELECT count(*) FROM lineitem").fetchone()[0]
    features, key = f"{TPCH_FEATURES}, {TPCH_SIGNED}, l.l_linestatus", "l.l_orderkey, l.l_linenumber"
    # The price is quantity x the part's price: without the latter, the part's price is left to learn.
    priced = features.replace(", p.p_retailprice", "")
    name = f"TPC-H SF {scale:g}, {rows:,} lineitems"
    returned = "CAST(l.l_returnflag = 'R' AS INTEGER) AS returned"
    return [
        job(name, db, "regression", f"SELECT {priced}, l.l_extendedprice {TPCH_FROM}", "l_extendedprice", key),
        job(name, db, "binary", f"SELECT {features}, {returned} {TPCH_FROM}", "returned", key),
    ]


def retail_jobs(folder: Path, rows: int) -> list[dict]:
    db = folder / "retail.duckdb"
    files = write_retail_files(folder / "retail", rows=rows)
    with ilargi_db.connect(str(db)) as con:
        for table, path in files.items():
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{path.as_posix()}')")
    query = (
        "SELECT s.promo, st.region, st.floor_m2, p.category, p.price, c.segment, c.age, {target} "
        "FROM sales s JOIN stores st ON s.store_id = st.store_id JOIN products p ON s.product_id = p.product_id "
        "LEFT JOIN customers c ON s.customer_id = c.customer_id WHERE s.units IS NOT NULL"
    )
    name = f"retail Parquet, {rows:,} sales"
    return [
        job(name, db, "regression", query.format(target="s.units"), "units", "s.sale_id"),
        job(name, db, "binary", query.format(target="CAST(s.units >= 7 AS INTEGER) AS high"), "high", "s.sale_id"),
        job(name, db, "multiclass", query.format(target="least(s.units // 4, 3) AS band"), "band", "s.sale_id"),
    ]


def favorita_jobs(folder: Path, source: Path | None) -> list[dict]:
    if source is None or not (source / "sales_small.csv").exists():
        print("Favorita skipped: pass --favorita <a JoinBoost checkout>/data/favorita", flush=True)
        return []
    db = folder / "favorita.duckdb"
    with ilargi_db.connect(str(db)) as con:
        for table, (file, _) in FAVORITA_TABLES.items():
            numbered = ", row_number() OVER () AS sale_id" if table == "sales" else ""  # a key to split by
            con.execute(f"CREATE TABLE {table} AS SELECT *{numbered} FROM read_csv('{(source / file).as_posix()}.csv')")
    aliases = {"sales": "s", "items": "i", "transactions": "t", "stores": "st", "holidays": "h", "oil": "o"}
    features = ", ".join(f'{aliases[t]}."{f}"' for t, (_, names) in FAVORITA_TABLES.items() for f in names)
    joins = " ".join(
        f"JOIN {b} {aliases[b]} ON {aliases[a]}.{ka} = {aliases[b]}.{kb}" for a, b, ka, kb in FAVORITA_JOINS
    )
    query = f"SELECT {features}, s.Y FROM sales s {joins}"
    return [job("Favorita (JoinBoost's sample)", db, "regression", query, "Y", "s.sale_id", joinboost=True)]


def frame(con, query: str, target: str, categories: dict | None = None):
    """The rows of ``query`` as pandas (VARCHAR as ``category``, with the training categories if given)."""
    import pandas as pd
    import pyarrow as pa

    table = con.sql(query).to_arrow_table()
    # DECIMAL (TPC-H's prices) as float64: pandas would hold Python Decimal objects, which neither library takes.
    floats = [pa.field(f.name, pa.float64()) if pa.types.is_decimal(f.type) else f for f in table.schema]
    data = table.cast(pa.schema(floats)).to_pandas()
    y = data.pop(target)
    for column in data.columns:
        if data[column].dtype == object or pd.api.types.is_string_dtype(data[column]):
            data[column] = pd.Categorical(data[column], categories=(categories or {}).get(column))
    return data, y


def fit_baseline(con, task: dict, side: str):
    import lightgbm
    import xgboost

    X, y = frame(con, task["train"], task["target"])
    regression = task["task"] == "regression"
    if side.startswith("lightgbm"):
        quantized = {"use_quantized_grad": True} if side == "lightgbm_quantized" else {}
        device = {"device_type": "gpu"} if task.get("backend") == "cupy" else {}  # LightGBM's GPU build, if it has one
        model = (lightgbm.LGBMRegressor if regression else lightgbm.LGBMClassifier)(**LIGHTGBM, **quantized, **device)
    else:
        device = {"device": "cuda"} if task.get("backend") == "cupy" else {}
        model = (xgboost.XGBRegressor if regression else xgboost.XGBClassifier)(**XGBOOST, **device)
    model.fit(X, y)
    categories = {c: X[c].cat.categories for c in X.columns if str(X[c].dtype) == "category"}
    return model, categories


def score_baseline(con, task: dict, fitted) -> float:
    from sklearn.metrics import r2_score, roc_auc_score

    model, categories = fitted
    X, y = frame(con, task["holdout"], task["target"], categories)
    if task["task"] == "regression":
        return float(r2_score(y, model.predict(X)))
    if task["task"] == "multiclass":
        return float((model.predict(X) == y.to_numpy()).mean())
    return float(roc_auc_score(y, model.predict_proba(X)[:, 1]))


def connect_side(db: str, baseline: bool, algorithm: str):
    """A side's read-only connection, its libraries loaded before the clock starts: a baseline's (LightGBM, XGBoost,
    scikit-learn's metrics), or ilargi's training modules (scikit-learn with them) for ``algorithm``; numba's
    kernels load inside the clock (the first training's cost: docs/benchmarks.md, "first call")."""
    import duckdb

    if baseline:
        import lightgbm  # noqa: F401
        import sklearn.metrics  # noqa: F401
        import xgboost  # noqa: F401

        con = duckdb.connect(db, read_only=True)
    else:
        con = ilargi_db.connect(db, read_only=True)
        estimator_class(algorithm)
        assert callable(ilargi_db.train)
    con.sql("SELECT 1").fetchall()
    return con


def child(side: str, spec: str) -> None:
    """One side on one job in this fresh process: print seconds, peak bytes and the held-out score as JSON."""

    task = json.loads(spec)
    con = connect_side(task["db"], side in BASELINES, ALGORITHM)
    peak = peak_from_now()
    start = time.perf_counter()
    if side in BASELINES:
        fitted = fit_baseline(con, task, side)
    else:
        options = {"strategy": "auto", "quantized_gradients": True} if side == QUANTIZED else {"strategy": side}
        if task["task"] == "multiclass":  # "auto" never picks multi-class
            options["objective"] = "log_loss"
        if task.get("backend") == "cupy":  # the trees grow on the GPU: rows, gradients and histograms there
            options["backend"] = "cupy"
            options.pop("quantized_gradients", None)  # the CPU's kernels only
        fitted = ilargi_db.train(con, task["train"], task["target"], algorithm=ALGORITHM, **options, **ILARGI)
    seconds, bytes_ = time.perf_counter() - start, peak()
    if side in BASELINES:
        score = score_baseline(con, task, fitted)
    else:
        score = float(ilargi_db.evaluate(con, fitted, task["holdout"])[METRIC[task["task"]]])
    chose = getattr(fitted, "strategy_", None) if side in ("auto", QUANTIZED) else None
    print(json.dumps({"seconds": seconds, "peak": bytes_, "score": score, "chose": chose}))


# JoinBoost in its own interpreter: it needs a writable database (it creates and updates tables), so the
# training rows are copied into an in-memory one before the clock starts.
JOINBOOST_RUN = """
import json, sys, time
import duckdb
from harness.processes import peak_from_now
from joinboost.app import GradientBoosting
from joinboost.executor import DuckdbExecutor
from joinboost.joingraph import JoinGraph
spec = json.loads(sys.argv[1])[0]
con = duckdb.connect()
con.execute(f"ATTACH '{spec['db']}' AS src (READ_ONLY)")
con.execute("USE src")
con.execute(f"CREATE TABLE memory.test AS {spec['holdout']}")
con.execute("USE memory")
for table in spec["tables"]:
    rows = f"* FROM src.{table}"
    if table == "sales":  # the training rows, without the key added to split them
        rows = f"* EXCLUDE (sale_id) FROM src.sales WHERE NOT ({spec['held_out']})"
    con.execute(f"CREATE TABLE {table} AS SELECT {rows}")
peak = peak_from_now()
start = time.perf_counter()
graph = JoinGraph(exe=DuckdbExecutor(con, debug=False))
for table, features in spec["tables"].items():
    graph.add_relation(table, features, y=spec["target"] if table == "sales" else None)
for a, b, ka, kb in spec["joins"]:
    graph.add_join(a, b, [ka], [kb])
model = GradientBoosting(**spec["params"])
model.fit(graph)
seconds, bytes_ = time.perf_counter() - start, peak()
rmse = model.compute_rmse("test")[0]
variance = con.execute(f"SELECT var_pop({spec['target']}) FROM test").fetchone()[0]
print(json.dumps({"seconds": seconds, "peak": bytes_, "score": 1 - rmse**2 / variance, "chose": None}))
"""


def run_joinboost(task: dict, python: str) -> dict:
    spec = {
        **task,
        "tables": {t: features for t, (_, features) in FAVORITA_TABLES.items()},
        "joins": FAVORITA_JOINS,
        "held_out": held_out("sale_id"),
        "params": JOINBOOST,
    }
    return run_fresh(
        ["-c", JOINBOOST_RUN, json.dumps([spec])], "JoinBoost on Favorita", JOINBOOST_TIMEOUT, python=python
    )


def measure(task: dict, sides: list[str], joinboost_python: str | None) -> dict:
    results = {}
    for side in sides + (["joinboost"] if task.get("joinboost") and joinboost_python else []):
        try:
            if side == "joinboost":
                results[side] = run_joinboost(task, joinboost_python)
            else:
                results[side] = run_child(__file__, side, json.dumps(task), timeout=TIMEOUT)
        except subprocess.TimeoutExpired as error:
            results[side] = {"error": f"timed out after {error.timeout:.0f} s"}
        except FreshRunFailed as error:
            results[side] = {
                "error": error.stderr.strip().splitlines()[-1][:300] if error.stderr.strip() else str(error)
            }
        r = results[side]
        shown = (
            f"{r['seconds']:8.2f} s  peak {r['peak'] / 2**20:7.0f} MiB  {METRIC[task['task']]} {r['score']:.4f}"
            if "error" not in r
            else f"failed: {r['error']}"
        )
        print(f"{task['name']:34s} {task['task']:10s} {side:12s} {shown}", flush=True)
    return results


def rows_of(task: dict, results: dict) -> list[str]:
    """The table rows of one job: every side, and its ratios to LightGBM's."""
    lines, ref = [], results.get(REFERENCE, {})
    for side, r in results.items():
        if "error" in r:
            lines.append(f"| {task['name']} | {task['task']} | {side} | failed: {r['error']} | | | | | |")
            continue
        label = side + (f" (chose {r['chose']})" if r.get("chose") else "")
        ratios = ["", "", ""]
        if "error" not in ref and ref and side != REFERENCE:
            ratios = [
                f"{ref['seconds'] / r['seconds']:.2f}x",
                f"{r['peak'] / max(ref['peak'], 1):.2f}",
                f"{r['score'] - ref['score']:+.4f}",
            ]
        lines.append(
            f"| {task['name']} | {task['task']} | {label} | {r['seconds']:.2f} | {r['peak'] / 2**20:.0f} | "
            f"{METRIC[task['task']]} {r['score']:.4f} | {' | '.join(ratios)} |"
        )
    return lines


def verdicts(tasks: list[dict], results: list[dict]) -> list[str]:
    """Each ilargi strategy against the targets, job by job."""
    lines = []
    for task, found in zip(tasks, results):
        ref = found.get(REFERENCE, {})
        for side in (*STRATEGIES, QUANTIZED):
            r = found.get(side)
            if not r or "error" in r or not ref or "error" in ref:
                continue
            speed, mem = ref["seconds"] / r["seconds"], r["peak"] / max(ref["peak"], 1)
            gap = abs(r["score"] - ref["score"])
            lines.append(
                f"- {task['name']}, {task['task']}, {side}: {speed:.2f}x faster "
                f"({'PASS' if speed >= TARGET_SPEEDUP else 'MISS'}), peak {mem:.2f} of LightGBM's "
                f"({'PASS' if mem <= TARGET_PEAK else 'MISS'}), score within {gap:.4f} "
                f"({'PASS' if gap <= TARGET_SCORE else 'MISS'})"
            )
    return lines


def render(tasks: list[dict], results: list[dict], how: str, notes: list[str], image: str | None) -> str:
    smoke = ALGORITHM not in ALGORITHMS
    lines = [
        "## Gradient-boosted trees end to end (`benchmarks/bench_trees.py`)" + (" (smoke)" if smoke else ""),
        "",
        f"{how}. Seconds from the SQL query to the fitted model, the first run in a fresh process; peak = "
        "VmHWM over the RSS before the run; the held-out score on the rows with "
        f"`{held_out('key')}` (R2 for regression, ROC AUC for binary, accuracy for three or four classes). "
        "Every side: 100 trees, learning rate "
        "0.1, depth 6, 63 leaves, 20 rows per leaf, 255 bins, no L2. LightGBM and XGBoost: DuckDB join -> "
        "Arrow -> pandas (VARCHAR as `category`, native categorical splits); XGBoost `hist`, `lossguide`. "
        "Ratios against LightGBM: its seconds / the side's, the side's peak / its peak, the score difference.",
        "",
    ]
    lines += notes + ([""] if notes else [])
    lines += [
        "| data set | task | side | seconds | peak MiB | held-out | LightGBM s / s | peak / LightGBM's "
        "| score - LightGBM |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for task, found in zip(tasks, results):
        lines += rows_of(task, found)
    targets = verdicts(tasks, results)
    if targets:
        lines += [
            "",
            f"Targets: >= {TARGET_SPEEDUP:g}x faster than join + LightGBM, peak <= {TARGET_PEAK:g} of it, "
            f"held-out score within {TARGET_SCORE:g}:",
            "",
            *targets,
        ]
    if image:
        lines += ["", f"![{image}]({image})"]
    return "\n".join(lines) + "\n"


def plot(tasks: list[dict], results: list[dict], folder: Path) -> str:
    """Seconds of every side, one panel per job (JoinBoost beside the others on Favorita)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(3.2 * len(tasks), 3.6), squeeze=False)
    for ax, task, found in zip(axes[0], tasks, results):
        done = {s: r for s, r in found.items() if "error" not in r}
        ax.bar(list(done), [r["seconds"] for r in done.values()], color="tab:blue")
        ax.set_title(f"{task['name']}\n{task['task']}", fontsize=8)
        ax.set_ylabel("seconds, SQL to fitted model")
        seconds = [r["seconds"] for r in done.values()]
        if seconds and max(seconds) > 20 * min(seconds):  # JoinBoost's minutes beside the others' seconds
            ax.set_yscale("log")
        ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    fig.tight_layout()
    path = folder / "trees_times.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def main(argv: list[str] | None = None) -> int:
    found = parser(__doc__, quick="small sizes (100k fact rows, TPC-H SF 0.05), for a smoke run", child=2)
    found.add_argument("--datasets", nargs="+", default=["star", "tpch", "retail", "favorita"])
    found.add_argument("--sides", nargs="+", help="the sides to run (default: every one)")
    found.add_argument("--tpch-scale", type=float, help="TPC-H scale factor (default 0.5, 0.05 with --quick)")
    found.add_argument("--favorita", type=Path, help="JoinBoost's data/favorita folder (its shipped sample)")
    found.add_argument("--joinboost-python", help="a Python with JoinBoost installed (its own virtual environment)")
    found.add_argument(
        "--backend",
        choices=["numpy", "cupy"],
        default="numpy",
        help="cupy: ilargi's trees on the GPU, XGBoost with device='cuda', LightGBM with device_type='gpu'",
    )
    args = found.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    rows = 100_000 if args.quick else 1_000_000
    scale = args.tpch_scale or (0.05 if args.quick else 0.5)
    sides = list(BASELINES)
    notes = []
    if ALGORITHM in ALGORITHMS:
        sides += [*STRATEGIES, QUANTIZED]
    else:
        print("ilargi: not available", flush=True)
        notes.append(
            f"ilargi: not available (no `{ALGORITHM}` in this build): the baselines alone, a smoke run of the "
            "script whose seconds are not figures to quote."
        )
    if args.sides:
        sides = [side for side in sides if side in args.sides]
    if args.favorita and not args.joinboost_python:
        notes.append("JoinBoost: not run (no --joinboost-python).")
    started = time.perf_counter()
    builders = {
        "star": lambda folder: star_jobs(folder, rows),
        "tpch": lambda folder: tpch_jobs(folder, scale),
        "retail": lambda folder: retail_jobs(folder, rows),
        "favorita": lambda folder: favorita_jobs(folder, args.favorita),
    }
    with tempfile.TemporaryDirectory() as folder:
        tasks = [{**t, "backend": args.backend} for name in args.datasets for t in builders[name](Path(folder))]
        results = [measure(task, sides, args.joinboost_python) for task in tasks]
    if args.output:
        image = plot(tasks, results, args.output.parent) if tasks else None
        how = ran(command(__file__, argv), time.perf_counter() - started)
        section = "bench_trees" if args.backend == "numpy" else f"bench_trees_{args.backend}"  # a GPU's apart
        write_section(args.output, section, render(tasks, results, how, notes, image))
    return 0


if __name__ == "__main__":
    sys.exit(main())
