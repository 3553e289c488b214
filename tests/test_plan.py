"""The planner: join graphs of the shapes a training query takes, and every refusal."""

from __future__ import annotations

import pytest

from ilargi_db import PlanError, build_join_graph
from ilargi_db.plan.sources import scalar_values

JOIN_GRAPHS = [
    (
        "two roles of one dimension, LEFT join, filter on one source",
        "SELECT f.dep_delay, o.lat AS olat, d.lat AS dlat, f.arr_delay FROM flights f "
        "JOIN airports o ON f.origin = o.faa LEFT JOIN airports d ON f.dest = d.faa WHERE f.hour < 3",
        "arr_delay",
        """source f (table)
source o (table)
source d (table, nullable)
join inner o on f.origin = o.faa
join left d on f.dest = d.faa
filter f.hour < 3 [scan of f]
feature dep_delay <- source f: f.dep_delay
feature olat <- source o: o.lat
feature dlat <- source d: d.lat
target arr_delay <- f: f.arr_delay""",
    ),
    (
        "snowflake, composite key, filter across sources stays in the join",
        "SELECT dep_delay, temp, gdp, arr_delay FROM flights f JOIN weather w "
        "ON f.origin = w.origin AND f.hour = w.hour JOIN airports a ON f.origin = a.faa "
        "JOIN countries c ON a.country_id = c.id WHERE temp + dep_delay > 0",
        "arr_delay",
        """source f (table)
source w (table)
source a (table)
source c (table)
join inner w on f.origin = w.origin, f.hour = w.hour
join inner a on f.origin = a.faa
join inner c on a.country_id = c.id
filter w.temp + f.dep_delay > 0 [join]
feature dep_delay <- source f: f.dep_delay
feature temp <- source w: w.temp
feature gdp <- source c: c.gdp
target arr_delay <- f: f.arr_delay""",
    ),
    (
        "comma join with the key in WHERE, USING, ORDER BY an alias",
        "SELECT p.seats AS s, w.temp FROM flights JOIN weather w USING (origin), planes p "
        "WHERE flights.tailnum = p.tailnum ORDER BY s DESC",
        None,
        """source flights (table)
source w (table)
source p (table)
join inner w on flights.origin = w.origin
join inner p on flights.tailnum = p.tailnum
filter flights.tailnum = p.tailnum [join]
feature s <- source p: p.seats
feature temp <- source w: w.temp
order p.seats DESC""",
    ),
    (
        "FULL join on USING: the key is fed by two sources",
        "SELECT origin, temp, lat FROM weather FULL JOIN airports a ON weather.origin = a.faa "
        "FULL JOIN (SELECT faa AS origin FROM airports) s USING (origin)",
        None,
        """source weather (table, nullable)
source a (table, nullable)
source s (subquery, nullable)
join full a on weather.origin = a.faa
join full s on weather.origin = s.origin
feature origin <- coalesce weather,s: COALESCE(weather.origin, s.origin)
feature temp <- source weather: weather.temp
feature lat <- source a: a.lat""",
    ),
    (
        "an expression mixing sources is recorded, not refused, by the planner",
        "SELECT f.dep_delay * p.seats AS load, 1 AS bias, f.arr_delay FROM flights f JOIN planes p USING (tailnum)",
        "arr_delay",
        """source f (table)
source p (table)
join inner p on f.tailnum = p.tailnum
feature load <- cross_source f,p: f.dep_delay * p.seats
feature bias <- source f: 1
target arr_delay <- f: f.arr_delay""",
    ),
]


@pytest.mark.parametrize("title, query, target, expected", JOIN_GRAPHS, ids=[c[0] for c in JOIN_GRAPHS])
def test_join_graph(con, title, query, target, expected):
    assert build_join_graph(con, query, target).describe() == expected


def test_star_expansion_matches_duckdb(con):
    graph = build_join_graph(con, "SELECT * FROM flights f JOIN planes p USING (tailnum)")
    assert graph.feature_names == con.sql("SELECT * FROM flights f JOIN planes p USING (tailnum)").columns
    graph = build_join_graph(con, "SELECT p.*, f.arr_delay FROM flights f NATURAL JOIN planes p", "arr_delay")
    assert graph.feature_names == ["tailnum", "year", "seats"]
    assert graph.joins[0].keys == (("f.tailnum", "p.tailnum"),)


def test_sources_of_every_kind(con, tmp_path):
    import pyarrow as pa

    path = tmp_path / "planes.parquet"
    con.sql(f"COPY planes TO '{path}' (FORMAT parquet)")
    con.register("extra", pa.table({"tailnum": ["N1"], "owner": [3.0]}))
    con.sql("CREATE VIEW late_flights AS SELECT * FROM flights WHERE late")
    graph = build_join_graph(
        con,
        f"WITH w AS (SELECT origin, avg(temp) AS t FROM weather GROUP BY origin) "
        f"SELECT seats, owner, t, dep_delay FROM late_flights f JOIN read_parquet('{path}') p USING (tailnum) "
        f"JOIN extra e ON f.tailnum = e.tailnum JOIN w ON w.origin = f.origin",
    )
    assert [(s.alias, s.kind) for s in graph.sources] == [
        ("f", "table"),
        ("p", "function"),
        ("e", "table"),
        ("w", "table"),
    ]


REFUSALS = [
    ("INSERT INTO flights SELECT * FROM flights", "INSERT statement"),
    ("DROP TABLE flights", "DROP statement"),
    ("SELECT 1; SELECT 2", "2 statements"),
    ("SELECT origin, count(*) FROM flights GROUP BY origin", "GROUP BY"),
    ("SELECT max(dep_delay) FROM flights", "aggregate MAX(dep_delay)"),
    ("SELECT dep_delay, avg(dep_delay) OVER () FROM flights", "window function"),
    ("SELECT DISTINCT origin FROM flights", "DISTINCT"),
    ("SELECT dep_delay FROM flights LIMIT 3 PERCENT", "must be a number of rows"),
    ("SELECT dep_delay FROM flights UNION ALL SELECT temp FROM weather", "set operation (UNION)"),
    ("SELECT dep_delay FROM nowhere", "unknown table 'nowhere'"),
    ("SELECT f.nothing FROM flights f", "column 'nothing' in SELECT (f.nothing) is not a column of source 'f'"),
    ("SELECT nothing FROM flights", "unknown column 'nothing' in SELECT"),
    ("SELECT z.dep_delay FROM flights f", "names 'z', which is not a source"),
    ("SELECT tailnum FROM flights f JOIN planes p ON f.tailnum = p.tailnum", "column 'tailnum' in SELECT is ambiguous"),
    ("SELECT dep_delay, seats FROM flights CROSS JOIN planes", "has no equality key"),
    ("SELECT dep_delay, seats FROM flights f JOIN planes p ON f.dep_delay > p.seats", "has no equality key"),
    ("SELECT dep_delay, seats FROM flights, planes", "has no equality key"),
    ("SELECT dep_delay FROM flights f SEMI JOIN planes p ON f.tailnum = p.tailnum", "SEMI JOIN is not supported"),
    ("SELECT dep_delay FROM flights f, flights f", "used twice"),
    ("SELECT dep_delay FROM", "could not parse"),
    ("", "empty"),
    ("SELECT dep_delay FROM flights TABLESAMPLE 50%", "draws whole vectors of rows"),
    ("SELECT f.dep_delay FROM flights f USING SAMPLE 10", "has no seed"),
    ("SELECT dep_delay, unnest([1, 2]) AS u FROM flights", "returns several rows per input row"),
    ("SELECT dep_delay, p.* REPLACE (p.seats * 2 AS seats) FROM flights f JOIN planes p USING (tailnum)", "REPLACE"),
    ("SELECT dep_delay, p.* EXCLUDE (year) FROM flights f JOIN planes p USING (tailnum)", "EXCLUDE"),
    ("SELECT dep_delay FROM flights f ASOF JOIN weather w ON f.hour >= w.hour", "ASOF JOIN is not supported"),
    ("SELECT " + "(" * 60 + "dep_delay" + ")" * 60 + " FROM flights", "nests expressions too deeply"),
]


@pytest.mark.parametrize("query, message", REFUSALS, ids=[m for _, m in REFUSALS])
def test_refusals_name_the_problem(con, query, message):
    with pytest.raises(PlanError) as err:
        build_join_graph(con, query)
    assert message in str(err.value)


def test_not_a_training_set_says_what_to_do(con):
    with pytest.raises(PlanError, match="does not describe a training set over joins.*materialize"):
        build_join_graph(con, "SELECT origin FROM flights GROUP BY origin")


@pytest.mark.parametrize(
    "query, target, message",
    [
        ("SELECT dep_delay FROM flights", "arr_delay", "target 'arr_delay' is not a column"),
        ("SELECT dep_delay AS y, arr_delay AS y FROM flights", "y", "appears 2 times"),
        ("SELECT dep_delay FROM flights", 3, "must be the name"),
    ],
)
def test_target_refusals(con, query, target, message):
    with pytest.raises(PlanError, match=message):
        build_join_graph(con, query, target)


def test_order_by_a_constant_is_dropped(con):
    graph = build_join_graph(con, "SELECT 5 AS c, f.dep_delay FROM flights f ORDER BY 1, 2")
    assert graph.order_by == ("f.dep_delay",)


RESERVED = [
    ("SELECT dep_delay AS __ilargi_row, arr_delay FROM flights", "the SELECT column '__ilargi_row'"),
    ("SELECT dep_delay AS __ILARGI_F0_0 FROM flights", "the SELECT column '__ILARGI_F0_0'"),
    ("SELECT r.seats FROM flights AS __ilargi_y JOIN planes r USING (tailnum)", "the source name '__ilargi_y'"),
    # A key of that name once joined in place of the scan's row number: a silently wrong model.
    (
        "SELECT f.dep_delay, d.seats FROM (SELECT * FROM flights) f JOIN odd d USING (__ilargi_row)",
        "column '__ilargi_row'",
    ),
    ("SELECT f.dep_delay, d.seats FROM flights f JOIN odd d ON f.id = d.__ilargi_rowid", "column '__ilargi_rowid'"),
    ("SELECT f.dep_delay, d.__ilargi_f1_0 AS w FROM flights f JOIN odd d ON f.id = d.seats", "column '__ilargi_f1_0'"),
]


@pytest.mark.parametrize("query, message", RESERVED, ids=[m for _, m in RESERVED])
def test_the_reserved_prefix_is_refused_at_planning(con, query, message):
    con.sql("ALTER TABLE flights ADD COLUMN __ilargi_row INTEGER DEFAULT 1")
    con.sql("CREATE VIEW odd AS SELECT 1 AS __ilargi_row, 2 AS __ilargi_rowid, 3.0 AS __ilargi_f1_0, 4 AS seats")
    with pytest.raises(PlanError, match="starts with __ilargi_, a prefix ilargi_db reserves") as err:
        build_join_graph(con, query)
    assert message in str(err.value)


def test_unread_columns_with_the_reserved_prefix_are_harmless(con):
    con.sql("ALTER TABLE flights ADD COLUMN __ilargi_row INTEGER DEFAULT 1")
    graph = build_join_graph(con, "SELECT f.dep_delay, f.arr_delay FROM flights f", "arr_delay")
    assert graph.feature_names == ["dep_delay"]


def test_a_deep_expression_in_a_view_is_planned(con):
    con.sql("CREATE VIEW deep AS SELECT id, " + "(" * 60 + "dep_delay" + ")" * 60 + " AS d FROM flights")
    assert build_join_graph(con, "SELECT v.d, f.arr_delay FROM flights f JOIN deep v USING (id)").feature_names == [
        "d",
        "arr_delay",
    ]


def test_scalar_values_come_in_order_from_one_query_under_the_query_s_with(con):
    items = [f"(SELECT count(*) FROM t WHERE x < {k})" for k in range(12)] + ["(SELECT max(x) / 2 FROM t)"]
    found = scalar_values(con, "WITH t AS (SELECT range AS x FROM range(10)) ", items)
    assert found == [min(k, 10) for k in range(12)] + [4.5]
    assert scalar_values(con, "", []) == []
