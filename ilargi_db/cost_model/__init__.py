"""The cost model: the physical plans a training job can run, their predicted seconds, and the choice.

- :mod:`~ilargi_db.cost_model.features`: the job's shape from two cheap aggregate queries.
- :mod:`~ilargi_db.cost_model.hardware`: cores, measured memory bandwidth and FLOP rate, the GPU.
- :mod:`~ilargi_db.cost_model.kernels`: a cost model per kernel (seconds from its shape's work terms),
  roofline priors, this machine's calibration, and a 2 ms probe of how busy the cores are.
- :mod:`~ilargi_db.cost_model.iterations`: expected iterations per solver, learned from earlier runs.
- :mod:`~ilargi_db.cost_model.plan`: candidate plans (strategy x solver x backend) as steps with seconds.
- :mod:`~ilargi_db.cost_model.memory`: each strategy's arrays against DuckDB's ``memory_limit``, and a streamed job's.
- :mod:`~ilargi_db.cost_model.shape_rule`: Amalur's rule, the choice from the data's shape alone (the fallback and
  the tie-break).
- :mod:`~ilargi_db.cost_model.explain`: the chosen plan, the runner-up and the reasons (``ilargi_db.explain``
  says them for a query).

Fitting the kernels (``ilargi_db.calibration.calibrate``) reads data through the training pipeline,
so it lives above training; this package never imports it.
"""

from ilargi_db.cost_model.explain import Explanation, explain_graph
from ilargi_db.cost_model.features import JobShape, JobStats, SourceStats, job_shape, job_stats
from ilargi_db.cost_model.hardware import Hardware, cache_dir, detect_hardware
from ilargi_db.cost_model.kernels import KernelCosts, kernel_costs, kernel_costs_path
from ilargi_db.cost_model.plan import PhysicalPlan, Step, candidate_plans

__all__ = [
    "Explanation",
    "Hardware",
    "JobShape",
    "JobStats",
    "KernelCosts",
    "PhysicalPlan",
    "SourceStats",
    "Step",
    "cache_dir",
    "candidate_plans",
    "detect_hardware",
    "explain_graph",
    "job_shape",
    "job_stats",
    "kernel_costs",
    "kernel_costs_path",
]
