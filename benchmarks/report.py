"""What every benchmark script shares: its section of docs/benchmarks.md, and timing the calls of a method."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def write_section(path: Path, name: str, section: str) -> None:
    """Replace the section between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path``, or append it.

    The rest of the file (hand-written notes included) is left as it is.
    """
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"{start}\n{section}{end}\n"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) + 1 :]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def publish(section: str, output: Path | None, name: str) -> None:
    """Print ``section``; given ``output`` (a script's ``--output``), write it there as section ``name``."""
    print(section)
    if output:
        write_section(Path(output), name, section)


def record_seconds(owner: Any, name: str) -> list[float]:
    """Wrap the method ``owner.name`` so that each call appends its seconds to the list returned.

    How the benchmarks time passes over the data (an evaluation of the loss, one ``_each``) inside a run.
    """
    seconds: list[float] = []
    method = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - began)

    setattr(owner, name, timed)
    return seconds


def run_fresh(code: str, *args: Any) -> dict:
    """Run ``code`` in a fresh Python process (its own peak memory, its own JIT state) with ``args`` as JSON in
    ``sys.argv[1]`` and this folder importable; the JSON object it prints last is the result."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    found = subprocess.run(
        [sys.executable, "-c", code, json.dumps(list(args))], capture_output=True, text=True, env=env, check=False
    )
    if found.returncode:
        raise SystemExit(f"the benchmark's run failed:\n{found.stderr[-4000:]}")
    return json.loads(found.stdout.strip().splitlines()[-1])
