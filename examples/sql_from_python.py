"""ilargi_db's SQL functions from a Python DuckDB session, and the model as a macro after reconnecting.

    python examples/sql_from_python.py [--db FILE]

Trains a logistic model ("is this flight more than 15 minutes late?") with
``SELECT ilargi_train(...)``, evaluates it on held-out months, scores with the
``late_predict`` macro, then reopens the database with plain ``duckdb`` (no
ilargi_db) and scores again.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import duckdb

import ilargi_db
from ilargi_db.datasets import load_nycflights13

QUERY = """
SELECT f.dep_delay, f.distance, f.carrier, p.seats, w.wind_speed, w.visib, f.arr_delay > 15 AS late
FROM flights f
LEFT JOIN planes p ON f.tailnum = p.tailnum
LEFT JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour
"""
SCORE = """
SELECT f.carrier,
       round(avg(late_predict(f.dep_delay, f.distance, f.carrier, p.seats, w.wind_speed, w.visib)), 3) AS p_late,
       round(avg((f.arr_delay > 15)::INT), 3) AS late
FROM flights f
LEFT JOIN planes p ON f.tailnum = p.tailnum
LEFT JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour
WHERE f.month > 10 AND f.arr_delay IS NOT NULL
GROUP BY f.carrier ORDER BY p_late DESC LIMIT 5
"""


def main(db: str) -> None:
    con = ilargi_db.connect(db)
    load_nycflights13(con)
    summary = con.execute(
        "SELECT ilargi_train('late', 'logistic_regression', ?, 'late', ?)",
        [QUERY + "WHERE f.month <= 10", json.dumps({"standardize": True, "C": 1.0})],
    ).fetchall()[0][0]
    summary = json.loads(summary)
    print(f"trained {summary['name']} v{summary['version']} ({summary['strategy']}) on {summary['rows']:,} rows")
    held_out = con.execute("SELECT ilargi_evaluate('late', ?)", [QUERY + "WHERE f.month > 10"]).fetchall()[0][0]
    print("held-out:", {k: round(v, 3) for k, v in json.loads(held_out)["metrics"].items()})
    model = ilargi_db.load_model(con, "late")  # the same model as a scikit-learn-style estimator
    print("coefficients:", {n: round(float(c), 3) for n, c in zip(model.feature_names_in_[:3], model.coef_)}, "...")
    con.close()

    plain = duckdb.connect(db)  # no ilargi_db: the macro is part of the database
    print(plain.sql(SCORE))
    plain.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="a DuckDB file (default: a temporary one)")
    args = parser.parse_args()
    if args.db:
        main(args.db)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(str(Path(tmp) / "flights.duckdb"))
