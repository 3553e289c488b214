"""The normalized matrix of a join graph as the query gives it, for ``normalize``: numbers as they are
(NULL is NaN, a row an outer join left empty adds 0, a BOOLEAN is 0 or 1), text and ENUM one-hot as
``train`` encodes them; and the storage (dense or CSR, dtype) a caller asks for."""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import scipy.sparse as sp

from ilargi_db.backend import Backend
from ilargi_db.linalg import Block, NormalizedMatrix
from ilargi_db.metadata import DIMetadata, extract_metadata
from ilargi_db.plan import JoinGraph, categorical_flags, is_numeric
from ilargi_db.preprocess.encoder import FeatureEncoder

SPARSE_DENSITY = 0.1  # sparse="auto" keeps a block sparse below this share of non-zeros


def estimated_density(data: np.ndarray, sample_rows: int = 20_000) -> float:
    """Share of non-zero entries, from evenly spaced rows (a full count costs a pass over the block)."""
    if not data.size:
        return 1.0
    step = max(1, data.shape[0] // sample_rows)
    sample = data[::step]
    return np.count_nonzero(sample) / sample.size


def stored_sparse(data: Any, sparse: bool | str) -> bool:
    """Whether a dense block is stored as CSR: always, never, or (``"auto"``) when it is mostly zeros."""
    return sparse is True or (sparse == "auto" and estimated_density(data) < SPARSE_DENSITY)


def to_normalized_matrix(
    meta: DIMetadata,
    backend: str | Backend = "auto",
    sparse: bool | str = "auto",
    encoder: FeatureEncoder | None = None,
) -> NormalizedMatrix:
    """Build the :class:`NormalizedMatrix` of the metadata on ``backend``: its numbers as they are (an empty
    row adds nothing), its text and ENUM features one-hot through ``encoder`` (fitted on ``meta``)."""
    blocks = []
    for b in meta.blocks:
        data = sp.csr_matrix(b.data) if stored_sparse(b.data, sparse) else b.data
        columns = b.columns if encoder is None else encoder.offsets_[b.columns]
        # An empty row whose expression is NULL contributes nothing (the DI formula): fill 0.
        blocks.append(Block(data=data, columns=columns, index=b.indicator, fill=np.nan_to_num(b.fill, nan=0.0)))
    for cat in meta.categoricals:
        block = encoder.transform_categorical(cat, meta.n_rows)
        if block is not None:
            blocks.append(block)
    names = meta.feature_names if encoder is None else encoder.feature_names_out_
    return NormalizedMatrix(blocks, n_rows=meta.n_rows, feature_names=names, backend=backend)


def raw_normalized_matrix(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, backend: Backend, sparse: bool | str, dtype: Any
) -> tuple[NormalizedMatrix, Any]:
    """``graph``'s matrix with the query's own numbers and text and ENUM one-hot, and its target (or None)."""
    text = [flag and not is_numeric(f.duckdb_type) for flag, f in zip(categorical_flags(graph), graph.features)]
    categorical = frozenset(j for j, flag in enumerate(text) if flag)
    meta = extract_metadata(con, graph, dtype=dtype, categorical=categorical)
    encoder = FeatureEncoder(text, impute=False).fit_metadata(meta) if categorical else None
    X = to_normalized_matrix(meta, backend, sparse, encoder)
    return X, None if meta.target is None else backend.asarray(meta.target)


def with_storage(X: NormalizedMatrix, sparse: bool | str, dtype: Any) -> NormalizedMatrix:
    """``X`` with its dense blocks stored as ``sparse`` asks and every block in ``dtype``."""
    blocks = []
    for block in X.blocks:
        data = block.data
        if not sp.issparse(data) and stored_sparse(data, sparse):
            data = sp.csr_matrix(data)
        blocks.append(
            Block(data=data.astype(dtype, copy=False), columns=block.columns, index=block.index, fill=block.fill)
        )
    return NormalizedMatrix(blocks, n_rows=X.shape[0], feature_names=X.feature_names, backend=X.backend)
