"""``normalize``: a training query in, a normalized matrix (and target) out."""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np

from ilargi_db.backend import NUMPY, get_backend, to_host
from ilargi_db.interruption import interruptible_job
from ilargi_db.linalg.binned_matrix import BinnedMatrix
from ilargi_db.linalg.feature_bins import MAX_BINS
from ilargi_db.metadata.target_labels import target_labels, with_target_classes
from ilargi_db.models.catalog import Strategy
from ilargi_db.pipeline.binned_readers import read_binned_factorized
from ilargi_db.pipeline.readers import ReadSettings, read_factorized
from ilargi_db.plan import (
    JoinGraph,
    build_join_graph,
    categorical_flags,
    check_single_source,
    check_target_type,
    mark_categorical_coalesce,
)
from ilargi_db.preprocess import FeatureEncoder
from ilargi_db.preprocess.binning import FeatureBinner
from ilargi_db.preprocess.raw_matrix import raw_normalized_matrix, with_storage
from ilargi_db.read_snapshot import ReadSnapshot


def check_factorizable(graph: JoinGraph) -> JoinGraph:
    """Refuse features that mix sources, or whose type is neither a number nor a category, naming each
    expression and what to do; a categorical COALESCE across sources mixes them too."""
    flags = categorical_flags(graph)  # refuses lists, structs and the like
    graph = mark_categorical_coalesce(graph, flags)
    check_single_source(graph)
    check_target_type(graph)
    return graph


@interruptible_job
def normalize(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None = None,
    backend: str = "auto",
    *,
    sparse: bool | str = "auto",
    dtype: Any = np.float64,
    impute: bool = False,
) -> tuple[Any, Any]:
    """Turn a training query into a normalized matrix of its features and its target: the matrix ``train`` fits.

    Text and ENUM features are one-hot encoded as ``train`` encodes them (one column per category seen,
    NULL its own category); numeric features are the query's numbers, or with ``impute=True`` exactly
    what ``train`` fits.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        The connection holding the tables.
    query : str
        A single SELECT over joined tables (DuckDB SQL).
    target : str or None
        Name of the SELECT column to return as ``y``; ``None`` for unsupervised work.
    backend : {"auto", "numpy", "cupy"}
        Where the blocks live; ``"auto"`` picks CuPy when a GPU is usable.
    sparse : bool or "auto"
        Store blocks as CSR: always, never, or when under 10% of entries are non-zero.
    dtype : NumPy dtype
        Floating type of the blocks (float64 by default).
    impute : bool
        ``X`` exactly as ``train`` (with its default ``impute=True``) fits it: the rows whose target is
        NULL left out, numeric NULLs and rows an outer join left empty at the training mean, BOOLEAN
        features one-hot too. Without it (the default) the numbers are the query's: NULL is NaN, an
        empty row adds 0, a BOOLEAN is 0 or 1.

    Returns
    -------
    X : NormalizedMatrix
        The features, in SELECT order, target excluded.
    y : array or None
        The target (NULL as NaN), on the same backend, or ``None``; a text target's labels (NULL as None) in a
        NumPy array.

    Notes
    -----
    A row that an outer join left empty contributes 0 to a source's columns (or
    the column's expression evaluated on NULLs, e.g. ``COALESCE(d.x, 5)`` gives
    5); a NULL stored in a source is NaN.

    Examples
    --------
    >>> import duckdb, ilargi_db
    >>> con = duckdb.connect()
    >>> _ = con.sql("CREATE TABLE f AS SELECT range % 2 AS k, range * 1.0 AS x, range * 2.0 AS y FROM range(4)")
    >>> _ = con.sql("CREATE TABLE d AS SELECT range AS k, 10.0 + range AS z FROM range(2)")
    >>> X, y = ilargi_db.normalize(con, "SELECT x, z, y FROM f JOIN d ON f.k = d.k ORDER BY x",
    ...                            target="y", backend="numpy")
    >>> X.shape, X.feature_names
    ((4, 2), ['x', 'z'])
    >>> X @ [1.0, 1.0]
    array([10., 12., 12., 14.])
    >>> y
    array([0., 2., 4., 6.])
    """
    from ilargi_db.cost_model.memory import check_job_memory

    be = get_backend(backend)
    with ReadSnapshot(con):  # every read sees one committed state of the database
        graph = with_target_classes(con, check_factorizable(build_join_graph(con, query, target)))
        check_job_memory(con, graph, Strategy.FACTORIZED)
        if not impute:  # the query's numbers as they are; text and ENUM one-hot as train encodes them
            X, y = raw_normalized_matrix(con, graph, be, sparse, dtype)
            return X, text_labels(graph, y)
        labelled = target is not None  # train learns from the rows whose target is not NULL
        encoder = FeatureEncoder(categorical_flags(graph), impute=True)
        data = read_factorized(con, graph, ReadSettings(encoder, fit=True, backend=be, labelled_only=labelled))
    return with_storage(data.X, sparse, dtype), None if data.y is None else text_labels(graph, be.asarray(data.y))


def text_labels(graph: JoinGraph, y: Any) -> Any:
    """A text target's labels (a NumPy array of text, None where NULL); any other target as it was read."""
    if y is None or graph.target_classes is None:
        return y
    return target_labels(to_host(y), graph.target.duckdb_type, graph.target_classes)


@interruptible_job
def binned_rows(
    con: duckdb.DuckDBPyConnection, query: str, target: str, max_bins: int = MAX_BINS
) -> tuple[BinnedMatrix, np.ndarray]:
    """A training query's rows binned as a tree model's ``train`` bins them, and its target.

    Each source's features are binned once per source row (every feature at DuckDB's quantiles of the training
    rows, a category its own bin), the rows whose target is NULL left out; the matrix is what
    ``GradientBoosting`` and ``RandomForest`` fit, and ``X[rows]`` selects rows of it without copying the bins.
    """
    from ilargi_db.cost_model.memory import check_job_memory

    with ReadSnapshot(con):  # every read sees one committed state of the database
        graph = with_target_classes(con, check_factorizable(build_join_graph(con, query, target)))
        check_job_memory(con, graph, Strategy.FACTORIZED)
        binner = FeatureBinner(categorical_flags(graph), max_bins)
        data = read_binned_factorized(con, graph, ReadSettings(binner, fit=True, backend=NUMPY, labelled_only=True))
    return data.X, text_labels(graph, np.asarray(data.y))
