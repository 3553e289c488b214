"""One row partition of a star's fact, encoded into a :class:`~ilargi_db.linalg.NormalizedMatrix`.

The one builder of a partition, for a stream (:mod:`ilargi_db.pipeline.streaming`, which spills the
encoded arrays between :meth:`PartitionBuilder.encode` and :meth:`PartitionBuilder.matrix`) and for a
cluster's workers (:mod:`ilargi_db.cluster.data`): the fact's numbers imputed, its categories as
codes into a shared identity block, and every dimension's block, encoded once and shared, indexed by
the partition's indicator.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ilargi_db.backend import NUMPY, Backend, get_backend
from ilargi_db.linalg import Block, NormalizedMatrix
from ilargi_db.linalg.blocks import merge_blocks_sharing_an_index
from ilargi_db.metadata import BlockMetadata, CategoricalMetadata
from ilargi_db.metadata.arrow_blocks import arrow_to_block
from ilargi_db.metadata.scans import part_column
from ilargi_db.metadata.stream import FactPartition
from ilargi_db.metadata.value_range import check_values
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.preprocess.encoder import FeatureEncoder


@dataclass(frozen=True)
class PartitionBuilder:
    """What every partition of the fact shares, and how one partition becomes a matrix over it.

    ``encode`` gives a partition's own arrays (what a stream spills): ``n_rows``, ``fact`` (its numeric
    features, imputed), ``codes/<j>`` (each categorical feature's one-hot column per row) and
    ``index/<alias>`` (each dimension's row per output row); ``matrix`` builds the partition from them.
    """

    encoder: FeatureEncoder  # fitted on the training rows
    fact: str  # the fact's alias
    numeric: tuple[int, ...]  # the fact's numeric features, by position
    text: tuple[int, ...]  # the fact's categorical features, by position
    names: tuple[str, ...]  # every feature's name (for the errors)
    dimensions: tuple[tuple[str, Block], ...]  # (alias, block): encoded once; a partition sets the index
    # A fact category's block: the identity over its one-hot columns, indexed by each row's code; built
    # once, shared by every partition as the dimensions are.
    codes: tuple[tuple[int, Block], ...]
    # Whether the shared blocks are resident (:meth:`on_device`): in working form on the backend's device,
    # each with a fill row and a zero row after its rows, which a partition's empty and absent rows take.
    resident: bool = False

    @classmethod
    def of(
        cls,
        graph: JoinGraph,
        fact: str,
        encoder: FeatureEncoder,
        dimensions: list[BlockMetadata],
        categoricals: list[CategoricalMetadata],
    ) -> PartitionBuilder:
        """The builder of ``fact``'s partitions, over the dimensions' blocks and categorical features
        (``metadata.stream.dimension_metadata``), encoded here once by the fitted ``encoder``.

        Refuses inf in a dimension, or values whose squares overflow, before they turn into NaN.
        """
        for block in dimensions:
            for i, j in enumerate(block.columns):
                check_values(block.data[:, i], graph.features[j].name)
        mine = [j for j, f in enumerate(graph.features) if f.parts[0].source == fact]
        text = tuple(j for j in mine if encoder.categorical[j])
        widths = {j: encoder.specs_[j].width for j in text}
        codes = tuple(
            (j, Block(sp.identity(w, format="csr"), columns=encoder.offsets_[j] + np.arange(w)))
            for j, w in widths.items()
        )
        numeric = tuple(j for j in mine if not encoder.categorical[j])
        shared = tuple(encoder.transform_dimensions(dimensions, categoricals))
        return cls(encoder, fact, numeric, text, tuple(graph.feature_names), shared, codes)

    def on_device(self, backend: Any) -> PartitionBuilder:
        """This builder with its shared blocks uploaded to ``backend``'s device once, for every partition and pass.

        Each source's blocks are merged into one (they share its indicator), given a fill row and a zero row
        (so that no partition appends to them) and, dense, laid out by column as the fused kernels read them:
        a partition then builds no block of its own from them, on the host or the device.
        """
        be = get_backend(backend)
        by_source: dict[str, list[Block]] = {}
        for alias, block in self.dimensions:
            if len(block.columns):
                by_source.setdefault(alias, []).append(block)
        dimensions = tuple((alias, _resident(blocks, be)) for alias, blocks in by_source.items())
        codes = tuple((j, _resident([identity], be)) for j, identity in self.codes)
        return dataclasses.replace(self, dimensions=dimensions, codes=codes, resident=True)

    def encode(self, part: FactPartition) -> dict[str, np.ndarray]:
        """Partition ``part``'s own arrays, encoded: the fact's numbers, its category codes, every indicator.

        Refuses inf, or values whose squares overflow, before they turn into NaN (as the in-memory read).
        """
        rows = np.arange(part.n_rows)
        arrays = {"n_rows": np.array(part.n_rows)}
        if self.numeric:
            data = arrow_to_block(part.fact, [part_column(j, 0) for j in self.numeric])
            for i, j in enumerate(self.numeric):
                check_values(data[:, i], self.names[j])
            fill = np.full(len(self.numeric), np.nan)
            meta = BlockMetadata(self.fact, data, rows, np.array(self.numeric), fill)
            arrays["fact"] = self.encoder.transform_block(meta).data
        for j in self.text:
            values = part.fact.column(part_column(j, 0)).combine_chunks()
            block = self.encoder.transform_categorical(CategoricalMetadata(self.fact, j, values, rows, None), 2)
            if block is not None:
                arrays[f"codes/{j}"] = block.index
        arrays.update({f"index/{alias}": index for alias, index in part.indicators.items()})
        return arrays

    def matrix(self, arrays: dict[str, np.ndarray], backend: Any = "numpy") -> NormalizedMatrix:
        """The partition's matrix from its arrays (:meth:`encode`) and the shared blocks."""
        blocks = []
        if "fact" in arrays:
            blocks.append(Block(arrays["fact"], columns=self.encoder.offsets_[list(self.numeric)]))  # row i is row i
        for j, identity in self.codes:
            if f"codes/{j}" in arrays:
                index = self._rows_taken(arrays[f"codes/{j}"], identity)
                blocks.append(Block(identity.data, columns=identity.columns, index=index))
        for alias, block in self.dimensions:
            index = self._rows_taken(arrays[f"index/{alias}"], block)
            blocks.append(Block(block.data, columns=block.columns, index=index, fill=block.fill))
        n = int(arrays["n_rows"])
        return NormalizedMatrix(blocks, n_rows=n, feature_names=self.encoder.feature_names_out_, backend=backend)

    def _rows_taken(self, index: np.ndarray, block: Block) -> np.ndarray:
        """A partition's indicator into a shared block: on a resident one, empty rows (-1) take its fill row
        and absent ones (-2) its zero row, the two after its ``r`` rows."""
        if not self.resident:
            return index
        r = block.data.shape[0] - len(RESIDENT_ROWS)
        return np.where(index < 0, (r - 1) - index, index)

    def build(self, part: FactPartition, backend: Any = "numpy") -> NormalizedMatrix:
        """Partition ``part``'s matrix: :meth:`encode`, then :meth:`matrix`."""
        return self.matrix(self.encode(part), backend)


RESIDENT_ROWS = ("fill", "zero")  # the rows after a resident block's own: -1 takes the first, -2 the second


def _resident(blocks: list[Block], backend: Backend) -> Block:
    """One source's shared blocks as one resident block (see :meth:`PartitionBuilder.on_device`)."""
    shared = np.empty(0, dtype=np.int64)  # one indicator object: the blocks merge into one
    (merged,) = merge_blocks_sharing_an_index([Block(b.data, b.columns, shared, b.fill) for b in blocks], NUMPY)
    width = len(merged.columns)
    fill = np.zeros(width) if merged.fill is None else np.asarray(merged.fill, dtype=np.float64)
    after = np.vstack([fill, np.zeros(width)])  # in RESIDENT_ROWS's order
    if sp.issparse(merged.data):
        data = sp.vstack([merged.data, sp.csr_matrix(after)], format="csr", dtype=np.float64)
    else:
        data = np.asfortranarray(np.vstack([np.asarray(merged.data, dtype=np.float64), after]))
    return Block(backend.to_device(data), columns=merged.columns, fill=merged.fill)


__all__ = ["RESIDENT_ROWS", "PartitionBuilder"]
