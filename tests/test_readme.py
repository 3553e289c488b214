"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_train_example_runs():
    namespace: dict = {}
    exec(compile(BLOCKS[0], "README.md", "exec"), namespace)
    assert namespace["model"].strategy_ in ("factorized", "materialized")


@pytest.mark.parametrize("block", BLOCKS[1:2])
def test_normalized_matrix_example_names_real_methods(block):
    import ilargi_db

    for name in re.findall(r"X\.(\w+)\(", block):
        assert hasattr(ilargi_db.NormalizedMatrix, name), name
