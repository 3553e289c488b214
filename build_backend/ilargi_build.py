"""The project's build backend: setuptools', plus the kernels compiled into numba's cache by an editable install.

``pip install -e .`` (the README's set-up) builds the editable wheel with setuptools, then compiles every kernel
(``ilargi_db.backend.compiled.warm_up``, what ``ilargi warmup`` does) into numba's cache beside the sources, a
process per kind of kernel: 10-35 s more of install on 2 cores, and the first training after installing loads
its kernels (about 10 ms each) instead of compiling them (8 s for 20 trees, 3 s for a linear model).

- Only an editable install compiles: numba finds its cache beside the source files a process imports
  (``__pycache__``), and an editable install imports the very files compiled here; a wheel's install copies them
  elsewhere (its kernels compile at first call, or in ``ilargi warmup``).
- The build environment holds what the kernels' modules import (:data:`KERNEL_REQUIRES`): where the target
  environment has numba (a reinstall), at its versions of numba, llvmlite and NumPy, which the install keeps (pip
  runs this backend with the target's interpreter; a released version only); else the newest, as its resolver
  picks them. numba keys its cache by its own version: a cache compiled by another numba is recompiled at first
  call, never run.
- A compile that fails or runs late leaves the install as it was (an interrupted one stops its processes); pip
  shows the line this backend prints (compiled, or why not) with ``pip install -v``. ``ILARGI_COMPILE_ON_INSTALL=0``
  skips the compile.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from setuptools import build_meta as setuptools_backend
from setuptools.build_meta import (  # noqa: F401 - the hooks this backend takes from setuptools as they are
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

ROOT = Path(__file__).resolve().parent.parent  # the project: ilargi_db/ is imported from here
SKIP_VARIABLE = "ILARGI_COMPILE_ON_INSTALL"  # "0" (or false, no, off): an editable install compiles nothing
KERNEL_REQUIRES = ["numba", "numpy", "scipy"]  # every package the kernels' modules import (a test pins it)
MATCHED = ["numba", "llvmlite", "numpy"]  # what compiled code depends on: the target's, where it has numba
RELEASE = re.compile(r"\d+(\.\d+)*")  # a version an index serves (not a local or development build): pinned
COMPILE_BUDGET_S = 600  # every kind's compile together (10-35 s on 2 cores): a hung one must not hang the install

# What the processes run (``python -c``): the kinds of kernels ("matrix", "bins"), then a kind's compile, which
# prints its count last and stops when its parent is gone (a cancelled install leaves no compile running).
LIST_KINDS = "from ilargi_db.backend.compiled import KERNEL_MODULES; print(*KERNEL_MODULES)"
COMPILE_KIND = """
import os, sys, threading, time
parent = os.getppid()

def orphaned():
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)

threading.Thread(target=orphaned, daemon=True).start()
from ilargi_db.backend.compiled import warm_up
print(len(warm_up(sys.argv[1:])))
"""
INSTALLED_VERSIONS = """
import importlib.metadata as metadata, sys
for name in sys.argv[1:]:
    try:
        print(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        pass
"""


def compiles_on_install() -> bool:
    """Whether an editable install compiles the kernels (unless ``ILARGI_COMPILE_ON_INSTALL`` says no)."""
    return os.environ.get(SKIP_VARIABLE, "1").strip().lower() not in ("0", "false", "no", "off")


def compile_requires(python: str = sys.executable) -> list[str]:
    """What the build environment needs to compile the kernels (nothing where it does not compile them): at the
    target environment's versions of :data:`MATCHED` where it has numba (``python``: the interpreter pip installs
    for), a set that already installs together; else the newest."""
    if not compiles_on_install():
        return []
    found = installed_versions(python, MATCHED)
    # A pin the index cannot serve would fail the whole install: the target's set is pinned only where it is releases.
    releases = "numba" in found and all(RELEASE.fullmatch(version) for version in found.values())
    pinned = {name: f"{name}=={version}" for name, version in found.items()} if releases else {}
    return [pinned.get(name, name) for name in KERNEL_REQUIRES] + [
        pinned[name] for name in MATCHED if name in pinned and name not in KERNEL_REQUIRES
    ]


def installed_versions(python: str, names: list[str]) -> dict[str, str]:
    """The versions of ``names`` installed for ``python`` itself, outside the build environment (``-E``: pip's
    PYTHONPATH into it ignored); none where that cannot be asked."""
    try:
        done = subprocess.run(
            [python, "-E", "-c", INSTALLED_VERSIONS, *names], capture_output=True, text=True, timeout=60, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


def get_requires_for_build_editable(config_settings: dict | None = None) -> list[str]:
    """setuptools' requirements, and what compiling the kernels imports."""
    return setuptools_backend.get_requires_for_build_editable(config_settings) + compile_requires()


def build_editable(
    wheel_directory: str, config_settings: dict | None = None, metadata_directory: str | None = None
) -> str:
    """setuptools' editable wheel, then the kernels compiled into numba's cache (see the module's docstring)."""
    name = setuptools_backend.build_editable(wheel_directory, config_settings, metadata_directory)
    if compiles_on_install():
        compile_kernels()
    return name


def compile_kernels(python: str = sys.executable, budget_s: float = COMPILE_BUDGET_S) -> bool:
    """Compile every kernel into numba's cache, a process per kind, with ``python`` importing ``ilargi_db`` from
    this project; whether it did. A failure is reported on stderr and changes nothing else."""
    began = time.monotonic()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started: list[subprocess.Popen] = []

    def start(code: str, *args: str) -> subprocess.Popen:
        process = subprocess.Popen(
            [python, "-c", code, *args], cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        started.append(process)
        return process

    def last_line(process: subprocess.Popen) -> str:
        """The last line the process printed, once it exits (within what is left of the budget)."""
        out, err = process.communicate(timeout=max(budget_s - (time.monotonic() - began), 0.1))
        if process.returncode != 0:
            raise RuntimeError((err.strip().splitlines() or [f"exit status {process.returncode}"])[-1])
        return (out.strip().splitlines() or [""])[-1]

    try:
        kinds = last_line(start(LIST_KINDS)).split()
        compiling = [start(COMPILE_KIND, kind) for kind in kinds]
        count = sum(int(last_line(process)) for process in compiling)
    except subprocess.TimeoutExpired:
        return not_compiled(f"not done within {budget_s:g} s")
    except (OSError, RuntimeError, ValueError) as error:
        return not_compiled(str(error))
    finally:
        for process in started:
            if process.poll() is None:  # stopped early: a failed, late or interrupted compile
                process.kill()
                process.wait()
    seconds = time.monotonic() - began
    print(f"ilargi_db: {count} kernels compiled into numba's cache in {seconds:.1f} s", file=sys.stderr)
    return True


def not_compiled(reason: str) -> bool:
    """Say why the kernels were not compiled on install (pip shows it with ``-v``); False."""
    print(
        f"ilargi_db: the kernels were not compiled on install ({reason}); they compile at first call, "
        "or run `ilargi warmup`",
        file=sys.stderr,
    )
    return False
