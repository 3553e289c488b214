"""The database tier on files beside the database: what it writes and says, and when it is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import numpy as np
import pytest

import ilargi_db
from ilargi_db.errors import IlargiError
from ilargi_db.reuse import artifacts, clear_artifacts
from ilargi_db.reuse.store import DatabaseTier
from tests.conftest import loading_artifacts_costs_nothing

STAR = "SELECT f.x, d.z, d.kind, f.y FROM f JOIN d ON f.k = d.k"
RUN = dict(backend="numpy", strategy="factorized", solver="normal")


def make_star(con, n: int = 5_000) -> None:
    con.execute(
        f"CREATE OR REPLACE TABLE f AS SELECT range % 20 AS k, sin(range) AS x, 2.0 * range AS y FROM range({n})"
    )
    con.execute(
        "CREATE OR REPLACE TABLE d AS SELECT range AS k, cos(range) AS z, ['a', 'b', 'c'][range % 3 + 1] AS kind "
        "FROM range(20)"
    )


@pytest.fixture
def stored(tmp_path, monkeypatch):
    """A database file whose training stored every artifact beside it (as a slower machine would)."""
    clear_artifacts()
    path = str(tmp_path / "db.duckdb")
    con = ilargi_db.connect(path)
    make_star(con)
    loading_artifacts_costs_nothing(monkeypatch)
    model = ilargi_db.train(con, STAR, "y", **RUN)
    return path, con, model


def test_the_payloads_live_in_files_beside_the_database_and_the_summary_says_so(stored):
    path, con, model = stored
    directory = Path(path + ".ilargi")
    (line,) = model.stored_
    assert line.startswith("stored ") and str(directory) in line and "B)" in line
    listed = [a for a in artifacts(con) if a["tier"] == "database"]
    assert {a["kind"] for a in listed} >= {"rows", "column", "stats", "gram"}
    for a in listed:  # each listed with its file and the bytes it takes
        assert Path(a["location"]).parent == directory and os.path.getsize(a["location"]) == a["nbytes"]
    assert sorted(p.name for p in directory.iterdir()) == sorted(Path(a["location"]).name for a in listed)
    assert directory.stat().st_mode & 0o777 == 0o700
    payload_bytes = con.execute("SELECT sum(octet_length(payload)) FROM ilargi.artifacts_store").fetchall()[0][0]
    assert payload_bytes < 100 * len(listed)  # the database holds only the index and each file's seal


def test_sql_train_summary_and_ilargi_artifacts_say_what_is_stored_where(tmp_path, monkeypatch):
    clear_artifacts()
    path = str(tmp_path / "sql.duckdb")
    con = ilargi_db.connect(path)
    make_star(con)
    loading_artifacts_costs_nothing(monkeypatch)
    summary = json.loads(con.sql(f"SELECT ilargi_train('m', 'linear_regression', '{STAR}', 'y')").fetchall()[0][0])
    (line,) = summary["artifacts_stored"]
    assert path + ".ilargi" in line
    listed = json.loads(con.sql("SELECT ilargi_artifacts()").fetchall()[0][0])
    on_disk = [a for a in listed if a["tier"] == "database"]
    assert on_disk and all(a["location"].startswith(path + ".ilargi") and a["nbytes"] > 0 for a in on_disk)
    assert {a["location"] for a in listed if a["tier"] == "memory"} == {"this process"}


def test_a_new_process_loads_from_the_files_and_gets_the_same_model(stored):
    path, con, _ = stored
    con.close()
    clear_artifacts()  # as a new process finds it
    con = ilargi_db.connect(path)
    model = ilargi_db.train(con, STAR, "y", alpha=2.0, **RUN)
    assert "the key-only join (rows, from database" in " | ".join(model.reused_)
    cold = ilargi_db.train(con, STAR, "y", alpha=2.0, reuse=False, **RUN)
    np.testing.assert_allclose(model.coef_, cold.coef_, rtol=1e-10)


def test_a_read_only_database_has_no_database_tier_and_no_error(stored):
    path, con, _ = stored
    con.close()
    before = sorted(os.listdir(path + ".ilargi"))
    clear_artifacts()
    ro = duckdb.connect(path, read_only=True)
    model = ilargi_db.train(ro, STAR, "y", alpha=3.0, **RUN)
    assert not any("from database" in line for line in model.reused_) and model.stored_ == []
    assert all(a["tier"] == "memory" for a in artifacts(ro))
    assert sorted(os.listdir(path + ".ilargi")) == before  # nothing written beside it either
    assert ilargi_db.clear_artifacts(ro)["database"] == 0  # and nothing cleared there


def test_reuse_memory_keeps_the_database_tier_out(stored):
    path, con, _ = stored
    clear_artifacts()
    model = ilargi_db.train(con, STAR, "y", alpha=3.0, reuse="memory", **RUN)
    assert not any("from database" in line for line in model.reused_) and model.stored_ == []
    again = ilargi_db.train(con, STAR, "y", alpha=4.0, reuse="memory", **RUN)
    assert any("from memory" in line for line in again.reused_)
    fresh = ilargi_db.connect(str(Path(path).with_name("fresh.duckdb")))
    make_star(fresh, 300)
    kept = ilargi_db.train(fresh, STAR, "y", reuse="memory", **RUN)
    assert kept.stored_ == [] and not Path(str(Path(path).with_name("fresh.duckdb")) + ".ilargi").exists()
    sql = '{"reuse": "memory"}'
    summary = json.loads(
        fresh.sql(f"SELECT ilargi_train('m', 'linear_regression', '{STAR}', 'y', '{sql}')").fetchall()[0][0]
    )
    assert summary["artifacts_stored"] == []


@pytest.mark.parametrize("bad", ["disk", 1, None])
def test_reuse_takes_true_false_or_memory(bad):
    con = ilargi_db.connect()
    make_star(con, 50)
    with pytest.raises(IlargiError, match="reuse must be True, False or 'memory'"):
        ilargi_db.train(con, STAR, "y", reuse=bad, **RUN)


def test_two_writers_at_once_leave_whole_files_and_a_consistent_index(tmp_path, monkeypatch):
    clear_artifacts()
    path = str(tmp_path / "two.duckdb")
    con = ilargi_db.connect(path)
    make_star(con)
    loading_artifacts_costs_nothing(monkeypatch)
    queries = [STAR, STAR.replace("d.kind, ", ""), STAR.replace("d.z, ", "")]
    errors: list[BaseException] = []

    def train(query: str) -> None:
        try:
            ilargi_db.train(con.cursor(), query, "y", **RUN)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=train, args=(q,)) for q in queries * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    directory = Path(path + ".ilargi")
    names = {p.name for p in directory.iterdir()}
    assert not any(n.startswith(".writing-") for n in names)  # each file renamed into place whole
    indexed = {Path(a["location"]).name for a in artifacts(con) if a["tier"] == "database"}
    assert indexed <= names  # every index row names a file that is there
    clear_artifacts()
    for query in queries:  # and what is there loads and gives the cold model
        warm = ilargi_db.train(con, query, "y", alpha=2.0, **RUN)
        cold = ilargi_db.train(con, query, "y", alpha=2.0, reuse=False, **RUN)
        np.testing.assert_allclose(warm.coef_, cold.coef_, rtol=1e-10)


def test_clearing_deletes_the_files_and_a_budget_evicts_them(stored):
    path, con, _ = stored
    directory = Path(path + ".ilargi")
    assert any(directory.iterdir())
    ilargi_db.set_artifact_budget(con, storage="1KB")
    assert sum(p.stat().st_size for p in directory.iterdir()) <= 1_000
    assert DatabaseTier.exists(con)
    ilargi_db.clear_artifacts(con)
    assert not any(directory.iterdir())


# -- a job repeated in a later process -------------------------------------------------------------


def test_a_later_process_repeating_a_job_gets_its_models_back_without_reading(stored):
    path, con, first = stored
    clear_artifacts()  # as a new process finds it
    again = ilargi_db.train(con, STAR, "y", **RUN)
    assert any(line.startswith("the trained model (fit, from database") for line in again.reused_)
    assert again.timings_["data"] == 0.0
    np.testing.assert_array_equal(again.coef_, first.coef_)
    assert again.intercept_ == first.intercept_ and again.training_metrics_ == first.training_metrics_
    np.testing.assert_array_equal(ilargi_db.predict(con, again, STAR), ilargi_db.predict(con, first, STAR))


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE f SET x = x + 1 WHERE k = 3",  # the data
        "UPDATE d SET kind = 'z' WHERE k = 2",  # a dimension's category
        "alpha",  # another hyperparameter
        "standardize",  # another setting
    ],
)
def test_a_job_that_differs_in_anything_trains_again(stored, change):
    path, con, first = stored
    kwargs = dict(RUN)
    if change == "alpha":
        kwargs["alpha"] = 3.0
    elif change == "standardize":
        kwargs["standardize"] = True
    else:
        con.execute(change)
    clear_artifacts()
    again = ilargi_db.train(con, STAR, "y", **kwargs)
    assert not any("(fit, from database" in line for line in again.reused_)
    assert again.timings_["data"] > 0.0


def test_an_unseeded_random_fit_is_drawn_again(tmp_path):
    clear_artifacts()
    con = ilargi_db.connect(str(tmp_path / "kmeans.duckdb"))
    make_star(con, 2_000)
    query = "SELECT f.x, d.z FROM f JOIN d ON f.k = d.k"
    ilargi_db.train(con, query, None, "kmeans", n_clusters=3, random_state=0)  # stores the read and its model
    clear_artifacts()
    seeded = ilargi_db.train(con, query, None, "kmeans", n_clusters=3, random_state=0)
    assert any("(fit, from database" in line for line in seeded.reused_)
    ilargi_db.train(con, query, None, "kmeans", n_clusters=3)
    clear_artifacts()
    again = ilargi_db.train(con, query, None, "kmeans", n_clusters=3)
    assert not any("(fit, from database" in line for line in again.reused_)


def test_a_new_process_repeats_a_job_from_the_files(stored):
    path, con, first = stored
    con.close()
    code = (
        "import json, sys, duckdb, ilargi_db\n"
        "con = duckdb.connect(sys.argv[1])\n"
        f"m = ilargi_db.train(con, {STAR!r}, 'y', backend='numpy', strategy='factorized', solver='normal')\n"
        "print(json.dumps({'reused': m.reused_, 'coef': m.coef_.tolist(), 'data': m.timings_['data']}))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=env, check=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert any(line.startswith("the trained model (fit, from database") for line in found["reused"])
    assert found["data"] == 0.0 and found["coef"] == first.coef_.tolist()


def test_a_cheap_models_record_waits_for_the_next_write(stored):
    """A commit costs an fsync: a job whose only new artifact is a quick model's record writes nothing, and the
    record goes with the next write."""
    path, con, _ = stored

    def fits() -> int:
        return sum(1 for a in artifacts(con) if a["tier"] == "database" and a["kind"] == "fit")

    assert fits() == 1
    quick = ilargi_db.train(con, STAR, "y", alpha=5.0, **RUN)  # the encoded matrix in memory: milliseconds
    assert quick.stored_ == [] and fits() == 1
    wider = ilargi_db.train(con, STAR.replace("d.kind, ", "d.kind, d.z * 2 AS z2, "), "y", **RUN)
    assert wider.stored_ and fits() == 3  # the new job's record, and the one that waited
    clear_artifacts()
    again = ilargi_db.train(con, STAR, "y", alpha=5.0, **RUN)
    assert any(line.startswith("the trained model (fit, from database") for line in again.reused_)


def test_a_quick_job_repeated_before_its_record_is_written_leaves_one_record_and_the_next_write_whole(stored):
    """Its record waits for the next write each time the job runs: the write keeps one per key (two would break
    the index's key and lose the whole write)."""
    path, con, _ = stored
    for _ in range(3):  # not written yet, so not found: each run trains and its record waits again
        assert ilargi_db.train(con, STAR, "y", alpha=7.0, **RUN).stored_ == []
    wider = ilargi_db.train(con, STAR.replace("d.kind, ", "d.kind, d.z * 3 AS z3, "), "y", **RUN)
    assert wider.stored_
    fits = [a for a in artifacts(con) if a["tier"] == "database" and a["kind"] == "fit"]
    assert len(fits) == 3  # the fixture's job, the quick one once, the wider one


def test_a_repeat_whose_models_are_not_all_stored_trains_and_says_nothing_was_reused(stored):
    path, con, _ = stored
    models = [("linear_regression", {"solver": "normal"}), ("linear_regression", {"alpha": 3.0})]
    clear_artifacts()  # the process's tier: only the database's records could serve a repeat
    batch = ilargi_db.train_batch(con, STAR, "y", models, backend="numpy", strategy="factorized")
    assert all(not any("the trained model" in line for line in m.reused_) for m in batch)
