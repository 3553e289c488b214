"""Training as typed phases, each in its own module, run in order by :mod:`.driver`.

=============  ==============================  =============================================
phase          module                          gives
=============  ==============================  =============================================
options        :mod:`.options`                 :class:`TrainOptions`, :class:`ModelSpec`
plan           :mod:`.planning`,               :class:`JobPlan` (graph, statistics, strategy,
               :mod:`.placement`               solvers, placement)
read           :mod:`.readers`,                :class:`TrainingData`
               :mod:`.streaming`, :mod:`.spill`
fit            :mod:`.fit`, :mod:`.metrics`    :class:`~ilargi_db.trained_model.TrainedModel`
record         :func:`.driver.record_job`      artifacts in the store
=============  ==============================  =============================================

Scoring (``predict``, ``evaluate``) reads another query through the same readers (:mod:`.scoring`).
"""

from ilargi_db.pipeline.driver import run_training, train, train_batch
from ilargi_db.pipeline.explaining import explain
from ilargi_db.pipeline.metrics import metrics_of, training_metrics
from ilargi_db.pipeline.options import ModelSpec, TrainOptions, model_specs
from ilargi_db.pipeline.planning import JobPlan
from ilargi_db.pipeline.readers import ReadSettings, TrainingData, read_training_data
from ilargi_db.pipeline.scoring import encoded_rows, evaluate, predict, predict_proba

__all__ = [
    "JobPlan",
    "ModelSpec",
    "ReadSettings",
    "TrainOptions",
    "TrainingData",
    "encoded_rows",
    "evaluate",
    "explain",
    "metrics_of",
    "model_specs",
    "predict",
    "predict_proba",
    "read_training_data",
    "run_training",
    "train",
    "train_batch",
    "training_metrics",
]
