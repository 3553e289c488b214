"""The cost estimator: pick factorized or materialized training per job, and say why.

- :mod:`~ilargi_db.estimator.features`: the job's features from two cheap aggregate queries.
- :mod:`~ilargi_db.estimator.hardware`: cores, measured memory bandwidth and FLOP rate, the GPU.
- :mod:`~ilargi_db.estimator.analytical`: FLOPs and bytes of each strategy over throughput (roofline).
- :mod:`~ilargi_db.estimator.learned`: gradient boosting on the roofline's log-residual.
- :mod:`~ilargi_db.estimator.calibration`: the grid of synthetic jobs and its measurements (running it,
  ``ilargi_db.calibration.calibrate``, trains models, so it lives above training).
- :mod:`~ilargi_db.estimator.explain`: the decision, both predicted times, the features and the reasons.
"""

from ilargi_db.estimator.calibration import CalibrationResult, calibration_path, grid_jobs
from ilargi_db.estimator.explain import Explanation, explain, explain_graph
from ilargi_db.estimator.features import JobStats, SourceStats, job_features, job_stats
from ilargi_db.estimator.hardware import Hardware, cache_dir, detect_hardware
from ilargi_db.estimator.learned import CostModel, load_model

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
