"""A temp cleaner that empties the spill directories when a stream's second pass begins (for the tests of
what training does when its spill files are lost)."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from ilargi_db.linalg import PartitionSource


def clean_spills_on_the_second_pass(monkeypatch: pytest.MonkeyPatch, where: Path) -> None:
    """From now on in the test, every spill file under ``where`` is removed as a stream's second pass begins."""
    real = PartitionSource.__getitem__

    def read_with_a_temp_cleaner(self: PartitionSource, k: int):
        if self.reads == self.n:  # the second pass begins
            for path in glob.glob(str(where / "ilargi-stream-*" / "*")):
                os.remove(path)
        return real(self, k)

    monkeypatch.setattr(PartitionSource, "__getitem__", read_with_a_temp_cleaner)
