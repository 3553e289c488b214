"""Import and connect: what ``import ilargi_db; ilargi_db.connect()`` costs a new process over DuckDB's own connect.

Issue 37's first target: within 0.3 s of ``import duckdb; duckdb.connect()`` on a quiet machine. Each case is a
fresh interpreter's wall time from start to exit (``python -c ...``, the interpreter's own start included on both
sides), the cases interleaved and repeated; the median and the spread are reported.

    python benchmarks/bench_import.py --output docs/benchmarks.md     # about 30 seconds
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.report import publish, ran  # noqa: E402

CASES = {
    "python alone": "pass",
    "import duckdb; duckdb.connect()": "import duckdb; duckdb.connect()",
    "import ilargi_db; ilargi_db.connect()": "import ilargi_db; ilargi_db.connect()",
    "... and the first SQL function (ilargi_artifacts)": (
        "import ilargi_db; ilargi_db.connect().sql('SELECT ilargi_artifacts()').fetchall()"
    ),
}
DUCKDB, ILARGI = "import duckdb; duckdb.connect()", "import ilargi_db; ilargi_db.connect()"


def wall_seconds(code: str) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__, repeats=15).parse_args(argv)
    started = time.perf_counter()
    for code in CASES.values():
        wall_seconds(code)  # the files in the page cache, the bytecode written
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.repeats):
        for name, code in CASES.items():
            times[name].append(wall_seconds(code))
    lines = ["| a fresh process runs | median s | min-max s |", "|---|---:|---:|"]
    for name, seconds in times.items():
        lines.append(f"| `{name}` | {statistics.median(seconds):.3f} | {min(seconds):.3f}-{max(seconds):.3f} |")
    over = statistics.median(times[ILARGI]) - statistics.median(times[DUCKDB])
    publish(
        [
            "## Import and connect, a fresh process (`benchmarks/bench_import.py`)",
            "",
            f"{ran(command(__file__, argv), time.perf_counter() - started)}. {args.repeats} rounds, the cases "
            f"interleaved. `ilargi_db.connect()` costs {over:.3f} s over DuckDB's own (target: at most 0.3 s).",
            "",
            *lines,
        ],
        args.output,
        "bench_import",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
