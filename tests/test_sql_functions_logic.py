"""Replay the SQL contract tests in sql/test/*.test (see tests/sqllogic.py for the format)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sqllogic import Runner, parse

TEST_FILES = sorted((Path(__file__).parents[1] / "sql" / "test").glob("*.test"))


def test_every_sql_function_has_its_contract_file():
    expected = {"train.test", "errors.test", "reconnect.test", "explain.test", "macros.test", "registry.test"}
    assert {p.name for p in TEST_FILES} >= expected


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_sql_file(path: Path, tmp_path: Path):
    runner = Runner(tmp_path)
    try:
        for record in parse(path.read_text()):
            runner.run(record, f"{path.name}:{record.line}")
    finally:
        runner.close()


def test_runner_catches_a_wrong_result(tmp_path: Path):
    runner = Runner(tmp_path)
    (record,) = parse("query I\nSELECT 1\n----\n2\n")
    with pytest.raises(AssertionError, match="expected"):
        runner.run(record, "inline")
    (record,) = parse("statement error\nSELECT 1\n----\nnope\n")
    with pytest.raises(AssertionError, match="should have failed"):
        runner.run(record, "inline")
    runner.close()
