"""Runs in fresh Python processes, and the peak resident memory a run adds.

A fresh process has its own peak memory and its own JIT state: what it measures is the run's alone.
The run prints one JSON object as its last line of output; that object is the result.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent  # benchmarks/: importable in the fresh process


class FreshRunFailed(RuntimeError):
    """A fresh process exited with an error (or printed nothing): its exit status and its standard error."""

    def __init__(self, what: str, returncode: int, stderr: str) -> None:
        super().__init__(f"{what} failed:\n{stderr[-4000:]}")
        self.returncode, self.stderr = returncode, stderr


def run_fresh(
    args: list[str], what: str, timeout: float | None = None, env: dict | None = None, python: str | None = None
) -> dict:
    """``python *args`` in a fresh process with ``benchmarks/`` importable; the JSON object it prints last.

    ``python``: another interpreter than this one (another virtual environment's, for a system that
    cannot share it); it imports nothing of ``harness`` but this module (the standard library only).

    Raises :class:`FreshRunFailed` when it fails, ``subprocess.TimeoutExpired`` past ``timeout`` seconds.
    """
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [python or sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {}), "PYTHONPATH": path},
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        raise FreshRunFailed(what, done.returncode, done.stderr)
    return json.loads(lines[-1])


def same_package_in_children() -> None:
    """Every fresh process started from now on imports the ilargi_db this process imported (say, a worktree's
    rather than an installed one): numba's cache is per source file, and the figures are of this code."""
    import ilargi_db

    package = str(Path(ilargi_db.__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [package, os.environ.get("PYTHONPATH")]))


def run_code(code: str, *args: Any) -> dict:
    """Run ``code`` in a fresh process with ``args`` as a JSON list in ``sys.argv[1]``."""
    return run_fresh(["-c", code, json.dumps(list(args))], "the benchmark's run")


def run_child(script: str, *args: str, timeout: float | None = None) -> dict:
    """Run ``script --child *args`` (the script measuring one thing) in a fresh process."""
    return run_fresh([script, "--child", *args], f"{Path(script).name} --child {' '.join(args)[:200]}", timeout)


def rss_bytes() -> int:
    """Resident set size of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def vm_hwm_bytes() -> int | None:
    """Peak RSS of this process's address space (VmHWM), or None where /proc has none."""
    try:
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:"))
    except (OSError, StopIteration):  # pragma: no cover - not Linux
        return None


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:  # pragma: no cover
        return False


def max_rss_bytes() -> int:
    """``ru_maxrss`` in bytes: the process's peak, which a child started by ``subprocess`` inherits from its
    parent's RSS at the spawn (Linux keeps the mark across fork + exec)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def peak_from_now() -> Callable[[], int]:
    """Start measuring: the function returned gives the peak resident bytes since, above the RSS now.

    The peak is VmHWM, reset now (after a garbage collection), so that it is this run's whatever the process
    held before.
    """
    gc.collect()
    before = rss_bytes()
    reset_hwm()
    return lambda: (vm_hwm_bytes() or rss_bytes()) - before
