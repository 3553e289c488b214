"""The project's build backend: setuptools', plus the kernels compiled into numba's cache by an editable install.

``pip install -e .`` (the README's set-up) builds the editable wheel with setuptools, then compiles every kernel
(``ilargi_db.backend.compiled.warm_up``, what ``ilargi warmup`` does) into numba's cache beside the sources:
about 15 s more of install on 2 cores, and the first training after installing loads its kernels (about 10 ms
each) instead of compiling them (8 s for 20 trees, 3 s for a linear model, measured before this backend).

- Only an editable install compiles. numba's cache is keyed by its source files' modification times: an editable
  install runs the very files compiled here, a wheel's install writes new ones (its kernels compile at first call,
  or in ``ilargi warmup``).
- The build environment holds only what the kernels' modules import (:data:`KERNEL_REQUIRES`), at the newest
  versions, as the install's resolver picks them. numba keys its cache by its own version too: a cache compiled
  by another numba is recompiled at first call, never run.
- A compile that fails warns and leaves the install as it was; ``ILARGI_COMPILE_ON_INSTALL=0`` skips it.
"""

from __future__ import annotations

import os
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
SKIP_VARIABLE = "ILARGI_COMPILE_ON_INSTALL"  # "0": an editable install compiles nothing
KERNEL_REQUIRES = ["numba", "numpy", "scipy"]  # every package the kernels' modules import (a test pins it)
COMPILE_TIMEOUT_S = 900  # a kind's compile: about 10-15 s on 2 cores; a hung one must not hang the install

# One process per kind of kernel ("matrix", "bins"): they compile on separate cores.
LIST_KINDS = "from ilargi_db.backend.compiled import KERNEL_MODULES; print(*KERNEL_MODULES)"
COMPILE_KIND = "import sys; from ilargi_db.backend.compiled import warm_up; print(len(warm_up(sys.argv[1:])))"


def compiles_on_install() -> bool:
    """Whether an editable install compiles the kernels (unless ``ILARGI_COMPILE_ON_INSTALL=0``)."""
    return os.environ.get(SKIP_VARIABLE, "1").strip() != "0"


def compile_requires() -> list[str]:
    """What the build environment needs to compile the kernels: nothing where it does not compile them."""
    return list(KERNEL_REQUIRES) if compiles_on_install() else []


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


def compile_kernels(python: str = sys.executable) -> bool:
    """Compile every kernel into numba's cache, a process per kind, with ``python`` importing ``ilargi_db`` from
    this project; whether it did. A failure is reported on stderr and changes nothing else."""
    began = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

    def start(code: str, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [python, "-c", code, *args], cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )

    try:
        listed = start(LIST_KINDS)
        kinds = finish(listed).split()
        compiling = [start(COMPILE_KIND, kind) for kind in kinds]
        try:
            count = sum(int(finish(process)) for process in compiling)
        finally:
            for process in compiling:
                process.kill()  # (those that finished: nothing)
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as error:
        print(
            f"ilargi_db: the kernels were not compiled on install ({error}); "
            "they compile at first call, or run `ilargi warmup`",
            file=sys.stderr,
        )
        return False
    seconds = time.perf_counter() - began
    print(f"ilargi_db: {count} kernels compiled into numba's cache in {seconds:.1f} s", file=sys.stderr)
    return True


def finish(process: subprocess.Popen) -> str:
    """The process's output once it exits; a RuntimeError with the end of its stderr where it failed."""
    out, err = process.communicate(timeout=COMPILE_TIMEOUT_S)
    if process.returncode != 0:
        last = (err.strip().splitlines() or [f"exit status {process.returncode}"])[-1]
        raise RuntimeError(last)
    return out
