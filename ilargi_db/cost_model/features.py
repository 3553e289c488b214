"""Features of a training job, computed before any feature block is read.

Two cheap DuckDB queries: one counts every source's rows (with an approximate
distinct count of each categorical feature and the share of zeros in a small
prefix of each numeric one), one runs the user's joins and filters with the
projection replaced by aggregates: the join's rows and, per source, how many
distinct source rows it references (HyperLogLog's approximate count: fan-out,
the M:N redundancy) and how many output rows it fills (LEFT-join gaps). No
feature column is joined or fetched. A base-table fact of more than 100,000
rows is sampled to about 100,000 by a hash of its rowid (the same rows on every
run; the counts scale with the share): deciding costs a bounded time whatever
the job's size.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

from ilargi_db.cost_model.shape_rule import cell_ratio, join_cells
from ilargi_db.errors import IlargiError
from ilargi_db.metadata.scans import join_columns, supports_rowid
from ilargi_db.models.catalog import algorithm_facts
from ilargi_db.plan import JoinGraph, is_categorical
from ilargi_db.plan.sampling import limited_rows
from ilargi_db.plan.sources import scalar_values, with_prefix
from ilargi_db.sql_text import quote_identifier

SAMPLE_JOIN_ROWS = 100_000  # above this many fact rows the statistics join reads a rowid-hash sample of them
SAMPLE_ROWS = 2048  # prefix of each source read to estimate the share of zeros


@dataclass(frozen=True)
class SourceStats:
    """One source as the cost model sees it."""

    alias: str
    rows: int  # rows of the source (after nothing: a catalog-style count)
    referenced: int  # distinct source rows the join uses (approximate, HyperLogLog)
    filled: int  # output rows this source fills (the rest are LEFT-join gaps)
    width: int  # encoded feature columns (a categorical counts its categories)
    categorical_width: int  # of which one-hot columns
    categorical_features: int = 0  # categorical features read from this source (each encodes its rows' text)


@dataclass(frozen=True)
class JobStats:
    """The join as the cost model sees it."""

    n_rows: int  # rows of the join
    sources: tuple[SourceStats, ...]
    fact: str  # the largest source with features (the fact table of a star)
    cross_width: int  # columns computed across sources (only the materialized join has them)
    numeric_zero_share: float  # share of zeros in the numeric feature cells (sampled)

    @property
    def width(self) -> int:
        return sum(s.width for s in self.sources) + self.cross_width

    def source(self, alias: str) -> SourceStats:
        return next(s for s in self.sources if s.alias == alias)

    def to_dict(self) -> dict:
        """Plain JSON values (the artifact store keeps statistics so)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, found: dict) -> JobStats:
        sources = tuple(SourceStats(**s) for s in found["sources"])
        return cls(
            int(found["n_rows"]), sources, found["fact"], int(found["cross_width"]), float(found["numeric_zero_share"])
        )


def _parts_by_source(graph: JoinGraph, flags: list[bool]) -> dict[str, list[tuple[str, bool]]]:
    parts: dict[str, list[tuple[str, bool]]] = {s.alias: [] for s in graph.sources}
    for feature, flag in zip(graph.features, flags):
        if feature.kind == "cross_source":
            continue
        for part in feature.parts:
            parts[part.source].append((part.sql, flag))
    return parts


def _count_sql(source: Any) -> str:
    return f"(SELECT count(*) FROM {source.relation_sql})"


def source_rows(con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> dict[str, int]:
    """Row counts per source (at least 1), in one query, before any feature column is read."""
    found = scalar_values(con, with_prefix(graph.select), [_count_sql(s) for s in graph.sources])
    return {s.alias: max(int(c), 1) for s, c in zip(graph.sources, found)}


def _source_items(graph: JoinGraph, parts: dict[str, list[tuple[str, bool]]]) -> tuple[list[str], list[tuple]]:
    """Scalar subqueries for one query: rows per source, approximate categories per categorical part, sampled
    zero shares; and what each is."""
    items, layout = [], []
    for s in graph.sources:
        items.append(_count_sql(s))
        layout.append(("rows", s.alias))
        numeric = [sql for sql, flag in parts[s.alias] if not flag]
        for sql, flag in parts[s.alias]:
            if flag:
                items.append(f"(SELECT approx_count_distinct({sql}) FROM {s.relation_sql})")
                layout.append(("categories", s.alias))
        if numeric:
            # TRY_CAST: the prefix ignores the query's filters, which may be what makes the cast succeed.
            cells = ", ".join(f"TRY_CAST(({sql}) AS DOUBLE) AS c{j}" for j, sql in enumerate(numeric))
            zeros = " + ".join(f"count(*) FILTER (WHERE c{j} = 0)" for j in range(len(numeric)))
            sample = f"(SELECT {cells} FROM {s.relation_sql} LIMIT {SAMPLE_ROWS})"
            items.append(f"(SELECT ({zeros}) / greatest(count(*) * {len(numeric)}, 1) FROM {sample})")
            layout.append(("zeros", s.alias))
    return items, layout


def _sample(select: exp.Select, alias: str, every: int) -> None:
    """Keep one row in ``every`` of source ``alias`` in ``select``, the same rows on every run (by rowid hash)."""
    # hash(rowid + 1), not hash(rowid): approx_count_distinct hashes rowid too, and must see random bits.
    select.where(f"hash({quote_identifier(alias)}.rowid + 1) % {int(every)} = 0", dialect="duckdb", copy=False)


def _join_query(con: duckdb.DuckDBPyConnection, graph: JoinGraph, sample: tuple[str, int] | None = None) -> str:
    """The user's FROM/WHERE with aggregates as projection: join rows, referenced and filled rows per source.

    ``sample`` = (alias, every) keeps one row in ``every`` of one base table (the fact of a large job).
    """
    keys = join_columns(graph)
    prefix = with_prefix(graph.select)
    items = ["count(*)"]
    for s in graph.sources:
        if supports_rowid(con, s, prefix):
            row = f"{quote_identifier(s.alias)}.rowid"
            items += [f"approx_count_distinct({row})", f"count({row})"]
        elif keys[s.alias]:
            cols = [f"{quote_identifier(s.alias)}.{quote_identifier(c)}" for c in keys[s.alias]]
            # A view or subquery has no rowid: its distinct join keys stand for its rows.
            items += [f"approx_count_distinct(({', '.join(cols)}))", f"count({cols[0]})"]
        else:
            items += ["count(*)", "count(*)"]
    select = graph.select.copy()
    select.set("expressions", [sqlglot.parse_one(i, read="duckdb") for i in items])
    for arg in ("order", "limit", "offset"):
        select.set(arg, None)
    if sample is not None:
        _sample(select, *sample)
    return select.sql("duckdb")


def job_stats(con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> JobStats:
    """Rows, widths, fan-outs and gaps of ``graph``'s join, from two aggregate queries.

    Examples
    --------
    >>> import duckdb
    >>> from ilargi_db.plan import build_join_graph
    >>> con = duckdb.connect()
    >>> _ = con.sql("CREATE TABLE f AS SELECT range % 4 AS k, range * 1.0 AS x FROM range(100)")
    >>> _ = con.sql("CREATE TABLE d AS SELECT range AS k, range * 2.0 AS z, range * 3.0 AS w FROM range(10)")
    >>> stats = job_stats(con, build_join_graph(con, "SELECT f.x, d.z, d.w FROM f JOIN d ON f.k = d.k"))
    >>> stats.n_rows, stats.fact, stats.source("d").rows, stats.source("d").referenced, stats.source("d").width
    (100, 'f', 10, 4, 2)
    """
    flags = [is_categorical(f.duckdb_type) for f in graph.features]
    parts = _parts_by_source(graph, flags)
    items, layout = _source_items(graph, parts)
    try:
        found = scalar_values(con, with_prefix(graph.select), items)
        rows = {alias: int(v) for (what, alias), v in zip(layout, found) if what == "rows"}
        # The fact (the largest source with features) of a large job is sampled: the join's size, fill and
        # fan-out scale with the share read; a dimension's distinct rows read are then a lower bound.
        with_parts = [s.alias for s in graph.sources if parts[s.alias]] or [s.alias for s in graph.sources]
        fact_alias = max(with_parts, key=lambda a: rows[a])
        scale = 1.0
        sample = None
        fact_source = next(s for s in graph.sources if s.alias == fact_alias)
        # The query's own USING SAMPLE keeps its rows: a count of them is exact, and another sample would bias it.
        sampled = graph.select.args.get("sample") is not None
        if (
            not sampled
            and rows[fact_alias] > SAMPLE_JOIN_ROWS
            and supports_rowid(con, fact_source, with_prefix(graph.select))
        ):
            every = math.ceil(rows[fact_alias] / SAMPLE_JOIN_ROWS)  # a base table: rows named by rowid
            sample, scale = (fact_alias, every), float(every)
        joined = con.sql(_join_query(con, graph, sample)).fetchall()[0]
    except duckdb.Error as err:
        raise IlargiError(f"could not count the rows of the training query's sources: {err}") from err
    categories: dict[str, list[int]] = {s.alias: [] for s in graph.sources}
    zeros: dict[str, float] = {}
    for (what, alias), value in zip(layout, found):
        if what == "rows":
            rows[alias] = int(value)
        elif what == "categories":
            categories[alias].append(int(value or 0) + 1)  # NULL is a category of its own
        else:
            zeros[alias] = float(value or 0.0)
    every_row = int(round(joined[0] * scale))
    n_rows = limited_rows(graph.select, every_row)  # the counts are of the join without its LIMIT
    kept = n_rows / every_row if every_row else 1.0
    sources = []
    numeric_cells = zero_cells = 0.0
    for i, s in enumerate(graph.sources):
        n_numeric = sum(1 for _, flag in parts[s.alias] if not flag)
        onehot = sum(categories[s.alias])
        sources.append(
            SourceStats(
                alias=s.alias,
                rows=rows[s.alias],
                # HyperLogLog may overshoot; only the sampled source's distinct rows scale with the sample
                referenced=min(
                    int(joined[1 + 2 * i] * (scale if s.alias == fact_alias else 1.0)), rows[s.alias], n_rows
                ),
                filled=min(int(round(joined[2 + 2 * i] * scale * kept)), n_rows),
                width=n_numeric + onehot,
                categorical_width=onehot,
                categorical_features=len(categories[s.alias]),
            )
        )
        numeric_cells += n_numeric
        zero_cells += n_numeric * zeros.get(s.alias, 0.0)
    with_features = [s for s in sources if s.width] or sources
    fact = max(with_features, key=lambda s: (s.rows, s.width)).alias
    cross = sum(1 for f in graph.features if f.kind == "cross_source")
    return JobStats(n_rows, tuple(sources), fact, cross, zero_cells / numeric_cells if numeric_cells else 0.0)


@dataclass(frozen=True)
class JobShape:
    """The job's shape (no hardware, no costs): rows, columns, ratios, redundancy, sparsity; what the plans'
    tie-breaks and ``explain``'s reasons read, and (:meth:`as_dict`) what it reports as ``features``."""

    algorithm: str
    rows: int  # joined rows
    rows_fact: int
    rows_dimensions: int
    n_sources: int
    n_dimensions: int
    columns: int  # the encoded matrix's columns
    columns_fact: int
    columns_dimensions: int
    columns_onehot: int
    columns_cross_source: int  # features that read columns of several sources (only the join computes them)
    categorical_features: int
    categorical_source_rows: int
    tuple_ratio_min: float  # join rows / a dimension's rows
    tuple_ratio_max: float
    tuple_ratio: float  # join rows / all dimensions' rows
    feature_ratio: float  # the dimensions' columns / the fact's
    feature_ratio_max: float
    redundancy_max: float  # join rows / the distinct rows of a source it uses
    fact_fanout: float  # join rows / the fact rows it uses (above 1: an M:N join)
    empty_share_max: float  # the most join rows a LEFT-joined dimension leaves empty, as a share
    sparsity: float  # the share of zero cells
    cells_materialized: float
    cells_factorized: float
    comp_ratio: float  # cells_materialized / cells_factorized
    rank: int  # the iterate's columns (clusters, components; 1 for linear models)

    def as_dict(self) -> dict[str, float | int | str]:
        return dataclasses.asdict(self)


def job_shape(stats: JobStats, algorithm: str, params: dict[str, Any]) -> JobShape:
    """The job's shape (:class:`JobShape`) from its statistics.

    Tuple ratio of a dimension = join rows / its rows; feature ratio = its
    width / the fact's width; redundancy = join rows / distinct rows it uses.
    """
    fact = stats.source(stats.fact)
    dims = [s for s in stats.sources if s.alias != stats.fact and s.width]
    n = max(stats.n_rows, 1)
    fact_width = max(fact.width, 1)
    tr = [n / max(s.rows, 1) for s in dims] or [1.0]
    fr = [s.width / fact_width for s in dims] or [0.0]
    redundancy = [n / max(s.referenced, 1) for s in stats.sources if s.width] or [1.0]
    gaps = [1 - s.filled / n for s in dims] or [0.0]
    d = stats.width
    onehot = sum(s.categorical_width for s in stats.sources)
    numeric = max(d - onehot, 0)
    # A one-hot column of c categories is (c-1)/c zeros; numeric zeros are sampled.
    onehot_zero = sum(s.categorical_width - 1 for s in stats.sources if s.categorical_width)
    zero_cells = numeric * stats.numeric_zero_share + max(onehot_zero, 0)
    cells_materialized, cells_factorized = join_cells(n, [(s.rows, s.width) for s in stats.sources], d)
    return JobShape(
        algorithm=algorithm,
        rows=int(stats.n_rows),
        rows_fact=int(fact.rows),
        rows_dimensions=int(sum(s.rows for s in dims)),
        n_sources=len(stats.sources),
        n_dimensions=len(dims),
        columns=int(d),
        columns_fact=int(fact.width),
        columns_dimensions=int(sum(s.width for s in dims)),
        columns_onehot=int(onehot),
        columns_cross_source=int(stats.cross_width),
        categorical_features=int(sum(s.categorical_features for s in stats.sources)),
        categorical_source_rows=int(sum(s.categorical_features * s.rows for s in stats.sources)),
        tuple_ratio_min=float(min(tr)),
        tuple_ratio_max=float(max(tr)),
        tuple_ratio=float(n / max(sum(s.rows for s in dims), 1)) if dims else 1.0,
        feature_ratio=float(sum(s.width for s in dims) / fact_width),
        feature_ratio_max=float(max(fr)),
        redundancy_max=float(max(redundancy)),
        fact_fanout=float(n / max(fact.referenced, 1)),
        empty_share_max=float(max(gaps)),
        sparsity=float(zero_cells / d) if d else 0.0,
        cells_materialized=cells_materialized,
        cells_factorized=float(cells_factorized),
        comp_ratio=cell_ratio(cells_materialized, cells_factorized),
        rank=algorithm_facts(algorithm).width(params),
    )
