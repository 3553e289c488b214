"""Kernels are compiled for their declared signatures only, each once per machine (a call compiles the one it
takes): after `ilargi warmup`, nothing compiles in a training."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
from numba.core import event, types

import ilargi_db
from ilargi_db.backend.compiled import kernels, warm_up
from ilargi_db.backend.copies import copy_into

OTHER_DTYPE = {"float64": np.float32, "bool": np.uint8}  # any other dtype of the same rank: no signature has it


def foreign_argument(t):
    """A value of a type close to ``t`` that no signature declares (int arrays become int16, float32...)."""
    if isinstance(t, types.Array):
        return np.zeros((1,) * t.ndim, dtype=OTHER_DTYPE.get(str(t.dtype), np.int16))
    return 1j  # no signature takes a complex scalar


def test_every_kernel_is_compiled_for_its_signatures_only():
    warm_up()
    for k in kernels():
        assert k.signatures and k.loaded
        assert len(k.dispatcher.signatures) == len(k.signatures), k
        args = [foreign_argument(t) for t in k.dispatcher.signatures[0]]
        with event.install_recorder("numba:compile") as compiled, pytest.raises(TypeError, match="No matching"):
            k(*args)
        assert not compiled.buffer, f"{k} compiled for {args}"


def star(con: duckdb.DuckDBPyConnection, key_type: str) -> None:
    """A fact of 40,000 rows (several chunks: the threaded paths) and a dimension, keys and counts as
    ``key_type``; every feature non-negative (NMF)."""
    con.execute(
        f"CREATE TABLE d AS SELECT range::{key_type} AS k, (range % 13) * 1.5 AS z, 'c' || (range % 5) AS cat "
        "FROM range(400)"
    )
    con.execute(
        f"CREATE TABLE f AS SELECT (range % 400)::{key_type} AS k, (range % 97) * 0.5 AS x, "
        f"(range % 7)::{key_type} AS n, 'g' || (range % 3) AS g, "
        "(range % 97) * 0.1 + (range % 13) AS y, ((range % 97) > 40)::INTEGER AS label FROM range(40000)"
    )


JOBS = {
    "linear_regression": ("y", {}),
    "logistic_regression": ("label", {"max_iter": 5}),
    "kmeans": (None, {"n_clusters": 3, "max_iter": 5, "n_init": 1}),
    "gnmf": (None, {"n_components": 2, "max_iter": 5}),
    "gradient_boosting": ("y", {"n_estimators": 3}),
}


@pytest.mark.filterwarnings("ignore:logistic regression .* stopped at max_iter")  # a few iterations suffice here
@pytest.mark.parametrize("key_type", ["INTEGER", "BIGINT"])
@pytest.mark.parametrize("strategy", ["factorized", "materialized"])
@pytest.mark.parametrize("algorithm", list(JOBS))
def test_no_kernel_compiles_during_a_training(algorithm, strategy, key_type):
    warm_up()  # what `ilargi warmup` does, and the first use on a machine: the cache
    con = ilargi_db.connect()
    star(con, key_type)
    target, params = JOBS[algorithm]
    label = f", f.{target}" if target else ""
    query = f"SELECT f.x, f.n, f.g, d.z, d.cat{label} FROM f JOIN d ON f.k = d.k"
    with event.install_recorder("numba:compile") as compiled:
        model = ilargi_db.train(con, query, target, algorithm, strategy, reuse=False, **params)
    assert model.strategy_ == strategy
    assert not compiled.buffer, [e.data["dispatcher"] for e in compiled.buffer]


def _double_first(values, out):  # a kernel of the test's own: two declared signatures
    out[0] = values[0] * 2


def test_a_call_compiles_the_declared_signature_it_takes_and_no_other():
    from ilargi_db.backend.compiled import Kernel

    kernel = Kernel(_double_first, [types.void(types.float64[::1], types.float64[::1]),
                                    types.void(types.int64[::1], types.int64[::1])])  # fmt: skip
    out = np.zeros(1)
    kernel(np.array([1.5]), out)
    assert out[0] == 3.0 and not kernel.loaded  # the float signature alone
    counts = np.zeros(1, dtype=np.int64)
    kernel(np.array([4], dtype=np.int64), counts)
    assert counts[0] == 8 and kernel.loaded  # now the int one too
    with event.install_recorder("numba:compile") as compiled, pytest.raises(TypeError, match="No matching"):
        kernel(np.zeros(1, dtype=np.float32), np.zeros(1, dtype=np.float32))
    assert not compiled.buffer  # undeclared types: refused, never compiled


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.bool_])
def test_copy_into_copies_as_slice_assignment_does(dtype):
    """The kernels' array copy (a loop: numba's slice assignment compiles its error message into every kernel)
    equals NumPy's ``dst[:] = src`` on contiguous rows, strided columns and slices."""
    rng = np.random.default_rng(0)
    source = (rng.normal(size=(7, 5)) * 10).astype(dtype)
    for take in (lambda a: a[3], lambda a: a[:, 2], lambda a: a[1:6, 4], lambda a: a[2, 1:4]):
        got, expected = np.zeros_like(source), np.zeros_like(source)
        copy_into(take(got), take(source))
        take(expected)[:] = take(source)
        np.testing.assert_array_equal(got, expected)
