"""The cost estimator: pick factorized or materialized training per job, and say why.

- :mod:`~ilargi_db.cost_model.features`: the job's features from two cheap aggregate queries.
- :mod:`~ilargi_db.cost_model.hardware`: cores, measured memory bandwidth and FLOP rate, the GPU.
- :mod:`~ilargi_db.cost_model.analytical`: FLOPs and bytes of each strategy over throughput (roofline).
- :mod:`~ilargi_db.cost_model.learned`: gradient boosting on the roofline's log-residual.
- :mod:`~ilargi_db.cost_model.calibration`: the grid of synthetic jobs and its measurements (running it,
  ``ilargi_db.calibration.calibrate``, trains models, so it lives above training).
- :mod:`~ilargi_db.cost_model.explain`: the decision, both predicted times, the features and the reasons.
"""

from ilargi_db.cost_model.calibration import CalibrationResult, calibration_path, grid_jobs
from ilargi_db.cost_model.explain import Explanation, explain, explain_graph
from ilargi_db.cost_model.features import JobStats, SourceStats, job_features, job_stats
from ilargi_db.cost_model.hardware import Hardware, cache_dir, detect_hardware
from ilargi_db.cost_model.learned import CostModel, load_model

__all__ = [
    "CalibrationResult",
    "CostModel",
    "Explanation",
    "Hardware",
    "JobStats",
    "SourceStats",
    "cache_dir",
    "calibration_path",
    "detect_hardware",
    "explain",
    "explain_graph",
    "grid_jobs",
    "job_features",
    "job_stats",
    "load_model",
]
