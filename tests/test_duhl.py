"""DuHL: primal-dual coordinate descent on row partitions, the largest duality gaps in fast memory."""

from __future__ import annotations

import numpy as np
import pytest

from ilargi_db.linalg import Block, PartitionedMatrix
from ilargi_db.models.duhl import duhl_ridge


def skewed(n: int = 12_000, d: int = 12, parts: int = 24, seed: int = 0):
    """Rows of a tenth of the partitions scaled up 8x: the duality gap concentrates there."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(n, d))
    rows[: n // 10] *= 8.0
    y = rows @ rng.normal(size=d) + 0.1 * rng.normal(size=n)
    X = PartitionedMatrix.from_blocks([Block(rows, columns=np.arange(d))], n, n // parts, backend="numpy")
    return X, y, rows


def test_the_certificate_holds_and_the_solution_is_ridges():
    X, y, rows = skewed()
    lam = 0.1
    fit = duhl_ridge(X, y, lam, working_set=3, tol=1e-9)
    exact = np.linalg.solve(rows.T @ rows + lam * len(y) * np.eye(rows.shape[1]), rows.T @ y)
    assert fit.gap_ <= 1e-9
    # The gap bounds the primal suboptimality: lambda/2 ||w - w*||^2 <= gap.
    assert 0.5 * lam * float((fit.coef_ - exact) @ (fit.coef_ - exact)) <= fit.gap_ + 1e-15
    assert fit.history_[-1][2] == pytest.approx(fit.gap_) and len(fit.history_) >= 1


def test_the_largest_gaps_first_need_fewer_partition_reads_than_sequential_or_random():
    X, y, _ = skewed()
    fits = {
        s: duhl_ridge(X, y, 0.1, working_set=3, tol=1e-6, selection=s, max_rounds=400)
        for s in ("gap", "sequential", "random")
    }
    assert fits["gap"].gap_ <= 1e-6
    # To the same gap, or not there at all within the rounds allowed:
    assert fits["gap"].loads_ < fits["random"].loads_ and fits["gap"].loads_ < fits["sequential"].loads_


def test_bad_settings_are_refused():
    X, y, _ = skewed(n=600, parts=6)
    with pytest.raises(ValueError, match="selection must be 'gap', 'sequential' or 'random'"):
        duhl_ridge(X, y, 0.1, working_set=2, selection="largest")
    with pytest.raises(ValueError, match="working_set must hold at least one partition"):
        duhl_ridge(X, y, 0.1, working_set=0)
