"""Multinomial logistic regression (4 classes): factorized over the star join against the materialized join.

Both ways train with ``ilargi_db.train`` (the same L-BFGS, the same objective: scikit-learn's), alternating,
fastest of ``--repeats``; scikit-learn's ``LogisticRegression`` is timed on the materialized matrix too
(its fit alone, the join already built). The class is the quartile of the star schema's ``y``.

    python benchmarks/bench_multinomial.py --output docs/benchmarks.md
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.report import publish, ran  # noqa: E402
from harness.timing import fastest_alternating, timed  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.datasets import make_star_schema  # noqa: E402

N_CLASSES = 4


def quartile_query(con, query: str) -> str:
    """The star query with its target ``f.y`` replaced by its quartile (0 to 3) as ``klass``."""
    ((cuts,),) = con.sql(f"SELECT quantile_cont(y, [0.25, 0.5, 0.75]) FROM ({query})").fetchall()
    klass = " + ".join(f"CAST(f.y > {float(c)!r} AS INTEGER)" for c in cuts) + " AS klass"
    return query.replace("f.y FROM", f"{klass} FROM")


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__, rows=400_000, repeats=3).parse_args(argv)
    warnings.simplefilter("ignore")
    started = time.perf_counter()
    con = ilargi_db.connect()
    star = make_star_schema(
        con, fact_rows=args.rows, fact_features=4, n_dims=2, dim_rows=args.rows // 20, dim_features=16, seed=1234
    )
    query = quartile_query(con, star.query())
    run = dict(backend="numpy", reuse=False)
    ways = {
        strategy: (lambda s=strategy: ilargi_db.train(con, query, "klass", "logistic_regression", strategy=s, **run))
        for strategy in ("factorized", "materialized")
    }
    ways["factorized"]()  # warm: numba compiles
    best, models = fastest_alternating(ways, args.repeats)
    from sklearn.linear_model import LogisticRegression

    table = con.sql(query).fetchnumpy()
    y = table.pop("klass")
    X = np.column_stack([np.asarray(v, dtype=float) for v in table.values()])
    sklearn_seconds, reference = timed(lambda: LogisticRegression(max_iter=100).fit(X, y))
    gap = float(np.abs(models["factorized"].coef_ - reference.coef_).max())
    ratio = best["materialized"] / best["factorized"]
    print(
        f"factorized {best['factorized']:.3f} s, materialized {best['materialized']:.3f} s ({ratio:.2f}x), "
        f"scikit-learn fit {sklearn_seconds:.3f} s; max |coef - scikit-learn's| {gap:.1e}; "
        f"{models['factorized'].n_iter_} iterations",
        file=sys.stderr,
    )
    con.close()
    lines = [
        "## Multinomial logistic regression (`benchmarks/bench_multinomial.py`)",
        "",
        ran(command(__file__, argv), time.perf_counter() - started) + ". "
        f"{N_CLASSES} classes (the quartile of y) on the star schema TR 20 / FR 4, {args.rows:,} fact rows; "
        f"`train` factorized against materialized, fastest of {args.repeats}, alternating, NumPy backend; "
        "scikit-learn's fit alone on the materialized rows (the join already built).",
        "",
        "| factorized | materialized | speed-up | scikit-learn fit | max abs coef gap to scikit-learn |",
        "|---:|---:|---:|---:|---:|",
        f"| {best['factorized']:.3f} s | {best['materialized']:.3f} s | **{ratio:.2f}x** | "
        f"{sklearn_seconds:.3f} s | {gap:.1e} |",
    ]
    publish(lines, args.output, "bench_multinomial")
    return 0


if __name__ == "__main__":
    sys.exit(main())
