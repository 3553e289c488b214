"""ilargi_db's main job on bundled example data: a star schema in DuckDB.

Builds a synthetic fact table and two dimension tables inside DuckDB, turns the
training query into a normalized matrix without materializing the join, and
checks every result against the same computation on the materialized join.

    python examples/star_schema.py                 # 1,000,000 fact rows, 2 x 50,000 dimension rows
    python examples/star_schema.py --rows 200000 --dim-rows 10000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import ilargi_db
from ilargi_db.datasets import make_star_schema
from ilargi_db.metadata.arrow_blocks import arrow_to_block


def timed(f, repeat: int = 3):
    """Result and best wall time of ``repeat`` runs."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - start)
    return out, best


def fresh(X, f):
    """``f`` on ``X`` with its memoized sums forgotten first: X^T X and column sums are computed once per matrix,
    so a repeat would time a copy of the first result instead of the work."""

    def run():
        X.memo.clear()
        return f()

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="fact rows (default 1,000,000)")
    parser.add_argument("--dim-rows", type=int, default=50_000, help="rows per dimension (default 50,000)")
    args = parser.parse_args(argv)

    con = ilargi_db.connect()
    schema = make_star_schema(con, fact_rows=args.rows, dim_rows=args.dim_rows, fact_features=5, dim_features=20)
    query = schema.query()
    print(f"training query over fact ({args.rows:,} x 5) and 2 dimensions ({args.dim_rows:,} x 20 each)")
    print("(best of 3 runs each; benchmarks/ has the careful, interleaved measurements)")
    print(f"tuple ratio {schema.tuple_ratio:g}, feature ratio {schema.feature_ratio:g}\n")

    # Warm both paths once (imports, DuckDB caches) so the timings compare steady states.
    ilargi_db.normalize(con, "SELECT f.x0 FROM fact AS f WHERE f.x0 < 0.001", backend="numpy")
    con.sql("SELECT f.x0 FROM fact AS f WHERE f.x0 < 0.001").to_arrow_table()
    (X, y), t_norm = timed(lambda: ilargi_db.normalize(con, query, target="y", backend="numpy"))
    table, t_mat = timed(lambda: con.sql(query).to_arrow_table())
    T, t_stack = timed(lambda: arrow_to_block(table, X.feature_names))
    t_mat += t_stack
    y_mat = table.column("y").to_numpy()
    # Without ORDER BY the two row orders may differ: line rows up by the (unique, random) target.
    ours, theirs = np.argsort(y), np.argsort(y_mat)
    print(X)
    rng = np.random.default_rng(0)
    w = rng.normal(size=X.shape[1])
    v = rng.normal(size=X.shape[0])
    rows = [("build", t_norm, t_mat, True)]
    v_ours, v_theirs = v[np.argsort(ours)], v[np.argsort(theirs)]  # the same v for the same rows
    for name, fact, mat, align in [
        ("X @ w (LMM)", lambda: X @ w, lambda: T @ w, True),
        ("X.T @ v", lambda: X.T @ v_ours, lambda: T.T @ v_theirs, False),
        ("X.T @ X (crossprod)", fresh(X, X.crossprod), lambda: T.T @ T, False),
        ("colsums", fresh(X, X.colsums), lambda: T.sum(axis=0), False),
    ]:
        a, ta = timed(fact)
        b, tb = timed(mat)
        if align:
            a, b = a[ours], b[theirs]
        rows.append((name, ta, tb, bool(np.allclose(a, b, rtol=1e-9, atol=1e-9 * np.abs(b).max()))))
    print(f"\n{'operation':<22}{'factorized s':>14}{'materialized s':>16}{'speed-up':>10}  equal")
    for name, ta, tb, equal in rows:
        print(f"{name:<22}{ta:>14.4f}{tb:>16.4f}{tb / ta:>9.1f}x  {equal}")
    blocks = sum(b.data.nbytes for b in X.blocks if hasattr(b.data, "nbytes"))
    print(f"\nnormalized matrix blocks: {blocks / 2**20:.1f} MiB; materialized join: {T.nbytes / 2**20:.1f} MiB")
    if not all(equal for *_, equal in rows):
        raise SystemExit("factorized and materialized results differ")


if __name__ == "__main__":
    main()
