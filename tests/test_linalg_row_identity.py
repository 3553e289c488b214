"""Row keys: a seeded hash of each row's values, the same for the same row however the matrix holds it and
whatever order the rows come in; selections by key (held-out rows, folds) follow the rows, not their positions."""

from __future__ import annotations

import numpy as np
import scipy.sparse

from ilargi_db.linalg import Block, NormalizedMatrix, PartitionedMatrix, ScaledMatrix
from ilargi_db.linalg.binned_matrix import BinnedMatrix, bin_array
from ilargi_db.linalg.feature_bins import quantile_bins
from ilargi_db.linalg.row_identity import first_by_key, folds_by_key, hash_values, row_keys


def _blocks(rng: np.random.Generator, order: np.ndarray) -> tuple[list[Block], np.ndarray]:
    """A fact block and a sparse dimension block (with rows an outer join left empty), its rows in ``order``."""
    fact = rng.normal(size=(40, 2))
    dim = scipy.sparse.csr_matrix(np.eye(5)[:, :3] * 2.0)
    index = rng.integers(-1, 5, size=40)
    blocks = [Block(fact[order], columns=[0, 1]), Block(dim, columns=[2, 3, 4], index=index[order])]
    dense = np.hstack([fact, np.where(index[:, None] >= 0, np.eye(5)[:, :3][index] * 2.0, 0.0)])
    return blocks, dense[order]


def test_a_row_has_one_key_however_the_matrix_holds_it_and_wherever_it_stands():
    rng = np.random.default_rng(0)
    shuffled = rng.permutation(40)
    blocks, dense = _blocks(np.random.default_rng(1), np.arange(40))
    moved, moved_dense = _blocks(np.random.default_rng(1), shuffled)
    y = np.arange(40) % 3
    keys = row_keys(dense, [y], seed=7)
    X = NormalizedMatrix(blocks, n_rows=40, backend="numpy")
    streamed = PartitionedMatrix.from_blocks(blocks, n_rows=40, rows_per_partition=9, backend="numpy")
    np.testing.assert_array_equal(row_keys(X, [y], seed=7), keys)
    np.testing.assert_array_equal(row_keys(streamed, [y], seed=7), keys)
    np.testing.assert_array_equal(row_keys(ScaledMatrix(X, np.ones(5), 2 * np.ones(5)), [y], seed=7), keys)
    np.testing.assert_array_equal(
        row_keys(NormalizedMatrix(moved, 40, backend="numpy"), [y[shuffled]], 7), keys[shuffled]
    )
    assert not np.array_equal(row_keys(dense, [y], seed=8), keys)  # the seed draws other keys
    assert not np.array_equal(row_keys(dense, [y + 1], seed=7), keys)  # the label is part of the row


def test_blocks_that_share_a_column_are_keyed_by_the_rows_they_add_up_to():
    """A feature of several sources (COALESCE): two blocks feed one column, and the row's value is their sum."""
    left = Block(np.array([[1.0], [0.0], [3.0]]), columns=[0])
    right = Block(np.array([[5.0], [7.0]]), columns=[0], index=np.array([-2, 0, 1]))
    other = Block(np.array([[2.0], [2.0], [4.0]]), columns=[1])
    X = NormalizedMatrix([left, right, other], n_rows=3, backend="numpy")
    np.testing.assert_array_equal(row_keys(X, seed=1), row_keys(X.materialize(), seed=1))


def test_equal_values_hash_equal_and_labels_of_any_type_alike():
    values = np.array([[0.0, np.nan, 1.0], [-0.0, float("nan") * -1, 1.0], [0.0, np.nan, 2.0]])
    h = hash_values(values)
    assert h[0] == h[1] != h[2]
    assert hash_values(np.array([1, 2])).tolist() == hash_values(np.array([1.0, 2.0])).tolist()
    text = np.array(["b", "a", "b"], dtype=object)
    keys = row_keys(np.zeros((3, 1)), [text])
    assert keys[0] == keys[2] != keys[1]


def test_binned_rows_are_keyed_by_their_bins():
    rng = np.random.default_rng(2)
    values = rng.normal(size=(30, 2))
    bins = quantile_bins(values, ["a", "b"], 8)
    binned: BinnedMatrix = bin_array(values, bins, 8)
    order = rng.permutation(30)
    np.testing.assert_array_equal(row_keys(binned[order], seed=3), row_keys(binned, seed=3)[order])


def test_selections_by_key_follow_the_rows():
    keys = np.random.default_rng(4).integers(0, 2**63, size=50, dtype=np.int64).astype(np.uint64)
    order = np.random.default_rng(5).permutation(50)
    assert sorted(order[first_by_key(keys[order], 10)].tolist()) == first_by_key(keys, 10).tolist()
    folds = folds_by_key(keys, 4)
    np.testing.assert_array_equal(folds_by_key(keys[order], 4), folds[order])
    assert np.bincount(folds).tolist() == [13, 13, 12, 12]


def test_copies_of_a_row_are_spread_over_a_selection_as_other_rows_are():
    # 1,000 rows of four distinct values: a fifth held out takes about a fifth of each value's copies (not all
    # of one value's copies and none of another's), the same copies' count in any row order.
    X = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]] * 250)
    held = first_by_key(row_keys(X, (), 0), 200)
    values, counts = np.unique(X[held], axis=0, return_counts=True)
    assert len(values) == 4 and counts.min() >= 25
    shuffled = X[np.random.default_rng(1).permutation(len(X))]
    again = first_by_key(row_keys(shuffled, (), 0), 200)
    assert sorted(map(tuple, shuffled[again].tolist())) == sorted(map(tuple, X[held].tolist()))
    folds = folds_by_key(row_keys(X, (), 0), 5)
    assert all(len(np.unique(X[folds == f], axis=0)) == 4 for f in range(5))
