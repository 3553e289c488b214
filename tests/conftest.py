from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import duckdb
import pytest

from tests.device_double import register as register_device_double

# The cost model's calibration and iteration history live in the user's cache: the tests use their own,
# so that neither the machine's calibration changes their plans nor they change the user's.
os.environ["ILARGI_CACHE_DIR"] = tempfile.mkdtemp(prefix="ilargi_test_cache_")
atexit.register(shutil.rmtree, os.environ["ILARGI_CACHE_DIR"], ignore_errors=True)  # nothing left in /tmp


# auto prices its plans for idle cores, however busy the machine running the tests: a test's plan, and so its
# rounding, never depends on the load (tests of the load probe pass it their own readings).
os.environ["ILARGI_PLAN_LOAD"] = "1"

register_device_double()  # backend="device_double": CuPy's strictness and copy counts without a GPU

# The device backends a test parametrized over backends runs on: CuPy where a GPU is usable, the double always.
DEVICE_BACKENDS = [pytest.param("cupy", marks=pytest.mark.gpu), "device_double"]


def gpu_usable() -> bool:
    """Whether the CuPy backend runs here (a CUDA GPU and CuPy)."""
    try:
        from ilargi_db.backend import get_backend

        get_backend("cupy")
        return True
    except Exception:
        return False


def loading_artifacts_costs_nothing(patch: pytest.MonkeyPatch) -> None:
    """As a machine whose database reads back instantly: every stored artifact is worth loading, so a job
    stores everything it makes however fast this machine recomputes it (the store's own load-cost model)."""
    from ilargi_db.reuse import store

    patch.setattr(store, "LOAD_SECONDS", 0.0)
    patch.setattr(store, "LOAD_BYTES_PER_SECOND", float("inf"))


def pytest_collection_modifyitems(config, items):
    if gpu_usable():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU with CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def con():
    """A small snowflake/star schema with the awkward cases a training query meets."""
    con = duckdb.connect()
    con.execute("""
        CREATE TABLE airports (faa VARCHAR, lat DOUBLE, alt INTEGER, country_id INTEGER);
        INSERT INTO airports VALUES ('JFK', 40.6, 13, 1), ('LGA', 40.8, 21, 1), ('LAX', 33.9, 38, 2),
                                    ('SFO', 37.6, 13, 2), ('ORD', 41.9, 672, NULL);
        CREATE TABLE countries (id INTEGER, gdp DOUBLE);
        INSERT INTO countries VALUES (1, 21.0), (2, 3.5), (3, 7.25);
        CREATE TABLE planes (tailnum VARCHAR, year INTEGER, seats INTEGER);
        INSERT INTO planes VALUES ('N1', 2004, 180), ('N2', 1999, 150), ('N3', 2015, 200), ('N1', 2010, 90);
        CREATE TABLE weather (origin VARCHAR, hour INTEGER, temp DOUBLE, wind DOUBLE);
        INSERT INTO weather VALUES ('JFK', 1, 20.5, 3.0), ('JFK', 2, 21.0, NULL), ('LGA', 1, 18.0, 5.5),
                                   ('LGA', 2, 17.5, 6.0);
        CREATE TABLE flights (id INTEGER, origin VARCHAR, dest VARCHAR, tailnum VARCHAR, hour INTEGER,
                              dep_delay DOUBLE, distance DECIMAL(8,2), late BOOLEAN, arr_delay DOUBLE);
        INSERT INTO flights VALUES
            (1, 'JFK', 'LAX', 'N1', 1, 5.0, 2475.00, false, 2.0),
            (2, 'JFK', 'SFO', 'N2', 2, -3.0, 2586.00, false, -8.0),
            (3, 'LGA', 'ORD', 'N3', 1, 30.0, 733.00, true, 41.0),
            (4, 'LGA', 'XXX', 'N9', 2, 12.5, 100.50, true, 10.0),
            (5, 'EWR', 'LAX', NULL, 3, 0.0, 2454.00, false, -1.5),
            (6, 'JFK', NULL, 'N1', 1, 7.0, 1000.00, false, 3.0);
    """)
    return con
