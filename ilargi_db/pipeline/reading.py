"""The read phase's dispatch: the training rows read where the plan placed them."""

from __future__ import annotations

import duckdb

from ilargi_db.cluster import cluster_data
from ilargi_db.errors import IlargiError
from ilargi_db.metadata.value_range import check_values
from ilargi_db.models.catalog import Placement
from ilargi_db.pipeline.binned_readers import BINNED_READERS
from ilargi_db.pipeline.planning import JobPlan
from ilargi_db.pipeline.readers import READERS, ReadSettings, TrainingData
from ilargi_db.pipeline.streaming import read_streamed
from ilargi_db.preprocess import FeatureEncoder
from ilargi_db.preprocess.binning import FeatureBinner


def read_job(con: duckdb.DuckDBPyConnection, job: JobPlan) -> TrainingData:
    """The training rows where the plan placed them: resident, streamed (close them after the fits) or on
    the cluster's workers."""
    if job.reads_bins:
        max_bins = {m.estimator.max_bins for m in job.models}
        if len(max_bins) > 1:
            raise IlargiError("the trees of a batch must share max_bins: the rows are binned once for all of them.")
        read = ReadSettings(FeatureBinner(job.flags, max_bins.pop()), fit=True, backend=job.backend)
        return BINNED_READERS[job.strategy](con, job.graph, read, job.artifacts)
    read = ReadSettings(FeatureEncoder(job.flags, impute=job.options.impute), fit=True, backend=job.backend, check=True)
    if job.placement == Placement.DISTRIBUTED:
        X, y, unlabelled = cluster_data(con, job.graph, read.encoder, job.client)
        if y is not None:
            check_values(y, job.graph.target.name, "target")
        return TrainingData(X, y, read.encoder, unlabelled)
    if job.placement == Placement.STREAMED:
        return read_streamed(con, job.graph, read, job.stream)
    return READERS[job.strategy](con, job.graph, read, job.artifacts)
