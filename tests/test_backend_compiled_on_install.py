"""The build backend (build_backend/ilargi_build.py) compiles the backend's kernels on an editable install: every
kernel lands in numba's cache, the build environment holds what they import, and a failed compile never fails the
install."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def backend():
    spec = importlib.util.spec_from_file_location("ilargi_build", ROOT / "build_backend" / "ilargi_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def in_fresh_process(code: str) -> object:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_project_builds_with_this_backend(backend):
    import tomllib

    system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    assert (system["build-backend"], system["backend-path"]) == ("ilargi_build", ["build_backend"])


def test_the_kernels_modules_need_only_what_the_build_environment_is_given(backend):
    allowed = [*backend.KERNEL_REQUIRES, "llvmlite", "ilargi_db"]  # llvmlite: numba's own requirement
    compiled = in_fresh_process(
        "import importlib.abc, json, sys\n"
        "class OnlyTheBuildEnvironment(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] not in sys.stdlib_module_names | set({allowed!r}):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, OnlyTheBuildEnvironment())\n"
        "from ilargi_db.backend.compiled import kernels\n"
        "print(json.dumps(len(kernels())))"
    )
    assert compiled > 0


def test_an_editable_install_leaves_every_kernel_in_numbas_cache(backend):
    assert backend.compile_kernels()
    missed = in_fresh_process(
        "import json\n"
        "from ilargi_db.backend.compiled import kernels, warm_up\n"
        "warm_up()\n"
        "print(json.dumps([k.__name__ for k in kernels() if sum(k.dispatcher.stats.cache_misses.values())]))"
    )
    assert missed == []  # each declared signature loaded from the cache, none compiled


def test_a_compile_that_fails_reports_it_and_the_install_goes_on(backend, tmp_path, capsys):
    failing = tmp_path / "python"
    failing.write_text("#!/bin/sh\necho 'numba: no target for this CPU' >&2\nexit 1\n")
    failing.chmod(0o755)
    assert backend.compile_kernels(python=str(failing)) is False
    assert backend.compile_kernels(python=str(tmp_path / "missing")) is False
    said = capsys.readouterr().err.splitlines()
    assert "numba: no target for this CPU" in said[0] and "ilargi warmup" in said[0]
    assert "ilargi warmup" in said[1]


def test_compiling_on_install_can_be_turned_off(backend, monkeypatch):
    assert backend.compile_requires() == backend.KERNEL_REQUIRES
    monkeypatch.setenv(backend.SKIP_VARIABLE, "0")
    assert backend.compile_requires() == []


def test_compiled_code_lives_in_the_backend_where_the_install_compiles_it():
    """A model compiles nothing of its own: numba is used in the backend only, whose kernels the install's compile
    and ``ilargi warmup`` cover (DuHL's SDCA epochs compiled at a first LinearSVC's call before)."""
    package = ROOT / "ilargi_db"
    outside = [
        p.relative_to(package).as_posix()
        for p in package.rglob("*.py")
        if p.relative_to(package).parts[0] != "backend" and re.search(r"^\s*(import|from) numba\b", p.read_text(), re.M)
    ]
    assert outside == []
