"""The machine a benchmark ran on: its cores, what other processes used meanwhile, versions, the git commit."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import time
from pathlib import Path

import duckdb
import numpy as np

import ilargi_db

ROOT = Path(__file__).resolve().parent.parent.parent
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # usable


def cpu_times() -> tuple[int, int, int]:
    """(steal, busy, total) jiffies of all CPUs, from /proc/stat (0, 0, 1 where unavailable)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
        return steal, user + nice + system + irq + softirq, sum(fields[:8])
    except OSError:  # pragma: no cover - not Linux
        return 0, 0, 1


def own_cpu_seconds() -> float:
    """CPU time of this process and its finished children (the fresh processes it ran)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class OtherProcesses:
    """From its creation on: the share of the machine's CPU time that other processes used (a shared
    machine's noise) and the CPU steal time."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.steal, self.busy, self.total = cpu_times()
        self.own = own_cpu_seconds()
        self.load = os.getloadavg()[0]  # the 1-minute load average at the start

    def share(self) -> float:
        """Other processes' share of the CPU time since the start."""
        wall = time.perf_counter() - self.started
        others = (cpu_times()[1] - self.busy) / os.sysconf("SC_CLK_TCK") - (own_cpu_seconds() - self.own)
        return max(0.0, others) / (wall * CORES)

    def steal_share(self) -> float:
        """The CPU's steal time since the start, as a share of its time."""
        steal, _, total = cpu_times()
        return (steal - self.steal) / max(1, total - self.total)


def git_commit() -> str:
    """The short commit of the checkout the benchmark ran from, marked when ilargi_db/ has changes; '?'."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "ilargi_db"], cwd=ROOT, capture_output=True, text=True)
    except OSError:  # pragma: no cover
        return "?"
    return rev.stdout.strip() + (" (ilargi_db/ has uncommitted changes)" if dirty.stdout.strip() else "")


def machine_facts(con: duckdb.DuckDBPyConnection) -> dict:
    """CPU, memory, platform and the versions of everything timed (BLAS included)."""
    facts = dict(
        python=platform.python_version(),
        numpy=np.__version__,
        duckdb=duckdb.__version__,
        ilargi_db=ilargi_db.__version__,
        platform=platform.platform(),
        cpus=os.cpu_count(),
        usable_cpus=CORES,
        duckdb_threads=con.sql("SELECT current_setting('threads')").fetchall()[0][0],
        git=git_commit(),
    )
    try:
        import pyarrow
        import scipy

        facts.update(pyarrow=pyarrow.__version__, scipy=scipy.__version__)
    except ImportError:  # pragma: no cover
        pass
    try:
        with open("/proc/cpuinfo") as f:
            facts["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
        with open("/proc/meminfo") as f:
            kib = int(next(ln for ln in f if ln.startswith("MemTotal")).split()[1])
            facts["memory"] = f"{kib / 2**20:.1f} GiB"
    except (OSError, StopIteration):  # pragma: no cover
        pass
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        facts["blas_build"] = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # pragma: no cover - older NumPy
        facts["blas_build"] = "?"
    try:
        from threadpoolctl import threadpool_info

        blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        facts["blas_runtime"] = ", ".join(
            f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} threads, {i.get('architecture')})"
            for i in blas
        )
    except ImportError:  # pragma: no cover
        facts["blas_runtime"] = "?"
    return facts
