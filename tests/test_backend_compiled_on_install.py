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
HOOKS = {  # PEP 517's and PEP 660's
    "build_wheel",
    "build_sdist",
    "get_requires_for_build_wheel",
    "get_requires_for_build_sdist",
    "prepare_metadata_for_build_wheel",
    "build_editable",
    "get_requires_for_build_editable",
    "prepare_metadata_for_build_editable",
}


@pytest.fixture(scope="module")
def backend():
    spec = importlib.util.spec_from_file_location("ilargi_build", ROOT / "build_backend" / "ilargi_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def compiling(monkeypatch):
    monkeypatch.delenv("ILARGI_COMPILE_ON_INSTALL", raising=False)


def in_fresh_process(code: str) -> object:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def fake_python(folder: Path, script: str) -> str:
    """An executable that stands in for the interpreter the backend starts (``python -c CODE ARGS``)."""
    path = folder / "python"
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return str(path)


def test_the_backend_has_every_hook_and_pyproject_names_it(backend):
    import tomllib

    assert HOOKS <= set(dir(backend)) and all(callable(getattr(backend, hook)) for hook in HOOKS)
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


def test_an_editable_install_fills_an_empty_cache_with_every_kernel(backend, compiling, monkeypatch, tmp_path):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert backend.compile_kernels()
    missed = in_fresh_process(
        "import json\n"
        "from ilargi_db.backend.compiled import kernels, warm_up\n"
        "warm_up()\n"
        "print(json.dumps([k.__name__ for k in kernels() if sum(k.dispatcher.stats.cache_misses.values())]))"
    )
    assert missed == []  # each declared signature loaded from the cache, none compiled


def test_build_editable_builds_then_compiles_unless_told_not_to(backend, compiling, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(backend.setuptools_backend, "build_editable", lambda *a: calls.append("build") or "x.whl")
    monkeypatch.setattr(backend, "compile_kernels", lambda: calls.append("compile") or True)
    assert backend.build_editable(str(tmp_path)) == "x.whl" and calls == ["build", "compile"]
    monkeypatch.setenv("ILARGI_COMPILE_ON_INSTALL", "off")
    calls.clear()
    assert backend.build_editable(str(tmp_path)) == "x.whl" and calls == ["build"]


def test_the_build_environment_gets_the_targets_numba_set_or_the_newest(backend, compiling, tmp_path):
    assert backend.compile_requires(python=sys.executable) == [
        *(f"{name}=={version(name)}" if name != "scipy" else name for name in backend.KERNEL_REQUIRES),
        f"llvmlite=={version('llvmlite')}",
    ]
    bare = fake_python(tmp_path, "echo 'numpy 1.26.4'")  # NumPy without numba: nothing pinned
    assert backend.compile_requires(python=bare) == backend.KERNEL_REQUIRES
    # A development build no index serves: pinning it would fail the whole install, so nothing is pinned.
    built = fake_python(tmp_path, "echo 'numba 0.62.0rc1+3.gdeadbee'; echo 'llvmlite 0.45.0'; echo 'numpy 2.3.0'")
    assert backend.compile_requires(python=built) == backend.KERNEL_REQUIRES


def version(name: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(name)


def test_compiling_on_install_can_be_turned_off(backend, monkeypatch):
    for said in ("0", "false", "No", "off"):
        monkeypatch.setenv("ILARGI_COMPILE_ON_INSTALL", said)
        assert backend.compile_requires() == [] and not backend.compiles_on_install()


def test_a_compile_that_fails_reports_it_and_the_install_goes_on(backend, tmp_path, capsys):
    failing = fake_python(tmp_path, "echo 'numba: no target for this CPU' >&2\nexit 1")
    assert backend.compile_kernels(python=failing) is False
    assert backend.compile_kernels(python=str(tmp_path / "missing")) is False
    # The kinds listed, then one kind's compile failing while the other runs on: both stopped, the failure said.
    kinds = fake_python(
        tmp_path,
        'case "$3" in matrix) echo "out of memory" >&2; exit 1;; bins) sleep 30; echo 3;; *) echo "matrix bins";; esac',
    )
    assert backend.compile_kernels(python=kinds) is False
    said = capsys.readouterr().err.splitlines()
    assert all("ilargi warmup" in line for line in said) and len(said) == 3
    assert "numba: no target for this CPU" in said[0] and "out of memory" in said[2]


def test_a_compile_past_its_budget_is_stopped(backend, tmp_path, capsys):
    slow = fake_python(tmp_path, 'case "$3" in "") echo "matrix";; *) sleep 30;; esac')  # python -c CODE KIND
    assert backend.compile_kernels(python=slow, budget_s=0.5) is False
    assert "not done within 0.5 s" in capsys.readouterr().err


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
