"""Nothing read from a database file is believed over the data: the store's payloads are sealed by this user's
processes, bounded when decoded, and each database sees only its own artifacts."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ilargi_db
from ilargi_db.plan import build_join_graph, categorical_flags
from ilargi_db.reuse import artifacts, clear_artifacts, fingerprint_job
from ilargi_db.reuse.codec import ALIGN, MAGIC, pack, unpack
from ilargi_db.reuse.fingerprint import still_the_same
from ilargi_db.reuse.job import JobReuse
from ilargi_db.reuse.seal import artifact_secret, seal, unseal
from ilargi_db.reuse.store import MEMORY, DatabaseTier
from tests.conftest import loading_artifacts_costs_nothing

QUERY = "SELECT f.x, d.z, d.kind, f.y FROM f JOIN d ON f.k = d.k"
RUN = dict(backend="numpy", strategy="factorized", solver="normal")


def make_star(con, seed: int, n: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 10, n)
    x = rng.normal(size=n)
    con.execute("CREATE TABLE f (k BIGINT, x DOUBLE, y DOUBLE)")
    con.executemany("INSERT INTO f VALUES (?, ?, ?)", [[int(a), float(b), float(scale * b + a)] for a, b in zip(k, x)])
    con.execute(
        "CREATE TABLE d AS SELECT range AS k, cos(range * ?) AS z, ['a', 'b', 'c'][range % 3 + 1] AS kind "
        "FROM range(10)",
        [scale],
    )


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(20, 200),
    scale=st.floats(0.5, 4.0),
    writer=st.sampled_from(["this user", "another user"]),
)
def test_a_store_written_by_another_database_file_never_changes_a_model(
    tmp_path_factory, monkeypatch, seed, n, scale, writer
):
    where = tmp_path_factory.mktemp("stores")
    loading_artifacts_costs_nothing(monkeypatch)
    if writer == "another user":  # their secret is not ours
        monkeypatch.setenv("ILARGI_CACHE_DIR", str(where / "their_cache"))
    theirs = ilargi_db.connect(str(where / "theirs.duckdb"))
    make_star(theirs, seed + 1, n + 7, scale + 1.0)
    ilargi_db.train(theirs, QUERY, "y", **RUN)
    stolen = theirs.execute("SELECT key, kind, payload FROM ilargi.artifacts_store ORDER BY key").fetchall()
    assert {kind for _, kind, _ in stolen} >= {"rows", "column", "stats", "gram"}
    their_files = {a["location"] for a in artifacts(theirs) if a["tier"] == "database"}
    theirs.close()
    monkeypatch.undo()
    loading_artifacts_costs_nothing(monkeypatch)
    ours = ilargi_db.connect(str(where / "ours.duckdb"))
    make_star(ours, seed, n, scale)
    ilargi_db.train(ours, QUERY, "y", **RUN)
    ours_directory = Path(DatabaseTier.location(ours))
    for found in their_files:  # their payload files copied beside our database, under their names
        shutil.copy(found, ours_directory / Path(found).name)
    # Same keys, other payloads: each of our artifacts' payload replaced by one of theirs of the same kind;
    # their own rows copied in as well.
    for key, kind, _ in ours.execute("SELECT key, kind, payload FROM ilargi.artifacts_store").fetchall():
        other = next((p for _, k, p in stolen if k == kind), None)
        if other is not None:
            ours.execute("UPDATE ilargi.artifacts_store SET payload = ? WHERE key = ?", [other, key])
    for key, kind, payload in stolen:
        ours.execute(
            "INSERT OR REPLACE INTO ilargi.artifacts_store VALUES (?, ?, 'theirs', ?, 1.0, 0, now(), now(), ?)",
            [key, kind, len(payload), payload],
        )
    clear_artifacts()  # as a new process finds the file
    warm = ilargi_db.train(ours, QUERY, "y", alpha=2.0, **RUN)
    cold = ilargi_db.train(ours, QUERY, "y", alpha=2.0, reuse=False, **RUN)
    assert not any("from database" in line for line in warm.reused_)
    np.testing.assert_array_equal(warm.coef_, cold.coef_)
    np.testing.assert_array_equal(warm.intercept_, cold.intercept_)
    ours.close()


def test_a_sealed_payload_opens_only_for_its_own_key_kind_and_secret():
    secret, other = b"s" * 32, b"o" * 32
    sealed = seal(secret, "key1", "rows", b"payload")
    assert unseal(secret, "key1", "rows", sealed) == b"payload"
    assert unseal(secret, "key2", "rows", sealed) is None  # moved under another key
    assert unseal(secret, "key1", "column", sealed) is None  # read as another kind
    assert unseal(other, "key1", "rows", sealed) is None  # another user's
    assert unseal(secret, "key1", "rows", sealed[:-1] + b"!") is None  # edited
    assert unseal(secret, "key1", "rows", b"payload") is None  # never sealed
    assert artifact_secret() == artifact_secret() and len(artifact_secret()) == 32


def test_a_header_claiming_more_than_the_payload_is_refused_before_it_is_read():
    payload = bytearray(pack({"a": np.arange(4)}))
    payload[len(MAGIC) : len(MAGIC) + 8] = (10**12).to_bytes(8, "little")
    with pytest.raises(ValueError, match="a header longer than the payload"):
        unpack(payload)
    assert unpack(pack({"a": np.arange(4)}))["a"].tolist() == [0, 1, 2, 3]  # what ilargi_db writes still reads


def test_arrays_read_back_as_they_were_as_aligned_views_of_the_buffer_read():
    arrays = {
        "positions": np.arange(-1, 100_000, dtype=np.int64),
        "large": np.array([0, 2**40], dtype=np.int64),
        "small": np.arange(3, dtype=np.int32),
        "matrix": np.arange(12.0).reshape(3, 4),
        "columns": np.asfortranarray(np.arange(12.0).reshape(4, 3)),  # a block as the kernels read it
        "flags": np.array([True, False]),
    }
    buffer = np.frombuffer(bytearray(pack(arrays)), dtype=np.uint8)
    back = unpack(buffer)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        np.testing.assert_array_equal(back[name], array)
        assert np.shares_memory(back[name], buffer) and (back[name].ctypes.data - buffer.ctypes.data) % ALIGN == 0
        assert back[name].flags.writeable  # training may clear values in place
        assert back[name].flags.f_contiguous == array.flags.f_contiguous  # column-major stays column-major


def test_a_damaged_arrow_array_in_a_payload_is_refused_not_used():
    import pyarrow as pa

    stream = bytearray(pack({"text": pa.array(["ab", "cd", None])}))
    offsets = stream.find(np.array([0, 2, 4], dtype=np.int32).tobytes())
    assert offsets > 0
    stream[offsets + 4 : offsets + 8] = np.int32(1 << 30).tobytes()  # an offset far past the data
    with pytest.raises((ValueError, pa.ArrowInvalid)):
        unpack(stream)


def test_each_database_sees_and_clears_only_its_own_artifacts(tmp_path):
    clear_artifacts()
    first = ilargi_db.connect(str(tmp_path / "first.duckdb"))
    second = ilargi_db.connect(str(tmp_path / "second.duckdb"))
    make_star(first, 0, 50, 1.0)
    make_star(second, 1, 50, 2.0)
    second.execute("ALTER TABLE d RENAME COLUMN z TO secret_feature")
    ilargi_db.train(first, QUERY, "y", **RUN)
    ilargi_db.train(second, QUERY.replace("d.z", "d.secret_feature"), "y", **RUN)
    listed = str(first.sql("SELECT ilargi_artifacts()").fetchall()[0][0])
    assert "secret_feature" not in listed and "'x'" in listed
    first.sql("SELECT ilargi_clear_artifacts()").fetchall()
    assert [a for a in artifacts(first) if a["tier"] == "memory"] == []
    assert any("secret_feature" in a["what"] for a in artifacts(second) if a["tier"] == "memory")


def test_a_file_rewritten_between_the_fingerprint_and_the_read_is_refused(tmp_path):
    con = ilargi_db.connect()
    path = tmp_path / "f.parquet"
    write = "COPY (SELECT range % 5 AS k, range * {m} AS x, range * 2.0 AS y FROM range(50)) TO '" + str(path) + "'"
    con.execute(write.format(m=1.0))
    con.execute("CREATE TABLE d AS SELECT range AS k, range * 3.0 AS z FROM range(5)")
    graph = build_join_graph(con, f"SELECT f.x, d.z, f.y FROM read_parquet('{path}') AS f JOIN d USING (k)", "y")
    flags = categorical_flags(graph)
    assert still_the_same(con, fingerprint_job(con, graph, flags))
    job = JobReuse.open(con, graph, flags)
    job.keep("stats", job.fingerprint.stats_key, "the job's statistics", {"n": 50}, 0.1)
    con.execute(write.format(m=1.5))  # rewritten before the read finished
    with pytest.raises(ilargi_db.IlargiError, match="changed while it was read"):
        job.confirm_read()
    assert job.fingerprint.stats_key not in MEMORY.items  # its artifacts are forgotten


def test_a_database_whose_macros_shadow_duckdb_built_ins_keeps_nothing_another_database_could_use(tmp_path):
    clear_artifacts()
    bent = ilargi_db.connect(str(tmp_path / "bent.duckdb"))
    honest = ilargi_db.connect(str(tmp_path / "honest.duckdb"))
    for con in (bent, honest):
        make_star(con, 3, 120, 1.5)
    bent.execute("CREATE MACRO ln(v) AS v * 0")  # and hidden from a plain listing of DuckDB's functions
    bent.execute("CREATE MACRO duckdb_functions() AS TABLE SELECT 'ln' AS function_name, true AS internal")
    query = "SELECT ln(1 + abs(f.x)) AS lx, d.z, f.y FROM f JOIN d ON f.k = d.k"
    bent_model = ilargi_db.train(bent, query, "y", **RUN)
    assert any("is defined in this database (a macro or function) over DuckDB" in line for line in bent_model.reused_)
    served = ilargi_db.train(honest, query, "y", **RUN)
    cold = ilargi_db.train(honest, query, "y", reuse=False, **RUN)
    np.testing.assert_array_equal(served.coef_, cold.coef_)


@pytest.mark.parametrize(
    "query, change",
    [
        ("SELECT f.x, COLUMNS('^z$'), f.y FROM f JOIN d USING (k)", "UPDATE d SET z = z + 1"),
        ("SELECT f.x, #5, f.y FROM f JOIN d USING (k)", "UPDATE d SET z = z + 1"),
        ("SELECT f.x, d.name, f.y FROM f JOIN d USING (k)", "UPDATE d SET name = '\\x61' WHERE name = 'a'"),
        ("SELECT f.x, d.name, f.y FROM f JOIN d USING (k)", "UPDATE d SET name = 'café' WHERE name = 'a'"),
        ("SELECT f.x, d.l[1] AS first, f.y FROM f JOIN d USING (k)", "UPDATE d SET l = ['-0.0'::DOUBLE] WHERE k = 0"),
        (
            "SELECT f.x, d.name, f.y FROM f JOIN d USING (k)",
            "CREATE TABLE d2 (k BIGINT, z DOUBLE, name VARCHAR COLLATE NOACCENT, l DOUBLE[]); "
            "INSERT INTO d2 SELECT * FROM d ORDER BY k; DROP TABLE d; ALTER TABLE d2 RENAME TO d",
        ),
    ],
)
def test_what_a_model_tells_apart_is_fingerprinted_apart(query, change):
    con = ilargi_db.connect()
    con.execute("CREATE TABLE f AS SELECT range % 4 AS k, sin(range) AS x, range * 1.0 AS y FROM range(40)")
    con.execute(
        "CREATE TABLE d AS SELECT range AS k, range * 0.5 AS z, ['a', 'b', 'c', 'd'][range + 1] AS name, "
        "[0.0::DOUBLE] AS l FROM range(4)"
    )
    graph = build_join_graph(con, query, "y")
    before = fingerprint_job(con, graph, categorical_flags(graph))
    assert before.reusable, before.why_not
    con.execute(change)
    after = fingerprint_job(con, graph, categorical_flags(graph))
    assert after.reusable and after.stats_key != before.stats_key


@pytest.mark.parametrize("planted", ["world-writable", "fifo", "symlink", "directory", "short"])
def test_a_secret_file_this_user_alone_could_not_have_written_is_never_believed(tmp_path, monkeypatch, planted):
    import os

    monkeypatch.setenv("ILARGI_CACHE_DIR", str(tmp_path))
    path = tmp_path / "artifact_secret"
    if planted == "world-writable":
        path.write_bytes(b"k" * 32)
        path.chmod(0o666)
    elif planted == "fifo":
        os.mkfifo(path)  # reading it would block every training
    elif planted == "symlink":
        (tmp_path / "elsewhere").write_bytes(b"k" * 32)
        path.symlink_to(tmp_path / "elsewhere")
    elif planted == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"k" * 31)
        path.chmod(0o600)
    assert artifact_secret() is None
    con = ilargi_db.connect(str(tmp_path / "db.duckdb"))
    make_star(con, 0, 40, 1.0)
    model = ilargi_db.train(con, QUERY, "y", **RUN)  # trains, stores nothing in the file, and says why
    assert any("artifact_secret is not a private file" in w for w in model.warnings_)
    assert not DatabaseTier.exists(con) or con.execute("SELECT count(*) FROM ilargi.artifacts_store").fetchall() == [
        (0,)
    ]


def test_two_in_memory_databases_see_and_clear_only_their_own_artifacts():
    first, second = ilargi_db.connect(), ilargi_db.connect()
    make_star(first, 0, 50, 1.0)
    make_star(second, 1, 50, 2.0)
    second.execute("ALTER TABLE d RENAME COLUMN z TO secret_bonus")
    first.sql(f"SELECT ilargi_train('m', 'linear_regression', '{QUERY}', 'y')").fetchall()  # from SQL
    ilargi_db.train(second, QUERY.replace("d.z", "d.secret_bonus"), "y", **RUN)  # from Python

    def listed(con) -> str:
        return str(con.sql("SELECT ilargi_artifacts()").fetchall()[0][0])

    assert "secret_bonus" not in listed(first) and "secret_bonus" in listed(second)
    first.sql("SELECT ilargi_clear_artifacts()").fetchall()
    assert "'x'" not in listed(first) and "secret_bonus" in listed(second)


def test_what_a_duckdb_release_answers_is_remembered_sealed(tmp_path, monkeypatch):
    from ilargi_db.reuse.remembered import remembered

    monkeypatch.setenv("ILARGI_CACHE_DIR", str(tmp_path))
    asked = []

    def answer() -> dict:
        asked.append(1)
        return {"names": ["abs", "sum"]}

    assert remembered("a question", answer) == remembered("a question", answer) == {"names": ["abs", "sum"]}
    assert len(asked) == 1  # asked once, then read back
    (kept,) = tmp_path.glob("duckdb-*.json")
    edited = bytearray(kept.read_bytes())
    edited[-3] ^= 0x01
    kept.write_bytes(bytes(edited))
    assert remembered("a question", answer) == {"names": ["abs", "sum"]} and len(asked) == 2  # not believed
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_bytes(kept.read_bytes())
    kept.unlink()
    kept.symlink_to(elsewhere)
    assert remembered("a question", answer) == {"names": ["abs", "sum"]} and len(asked) == 3  # not followed
