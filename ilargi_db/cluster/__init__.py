"""Training on a Dask cluster: the fact's Parquet files partitioned over the workers, the dimensions broadcast.

The sums these models need (X^T X, gradients, k-means' sums and counts) are sums of per-partition pieces,
so no shuffle is needed (background.md, section 6). The driver scans the dimensions (small), fits the
encoder in one aggregate query and broadcasts both; every worker runs DuckDB on its Parquet files for the
key-only join against the broadcast dimension keys, and keeps its partitions resident across
iterations. Each operator of the :class:`~ilargi_db.linalg.PartitionedMatrix` then runs where the
partitions are, and only its small results travel: the driver broadcasts parameters and adds the partials
in partition order (deterministic). A worker lost mid-training is survived: its partitions are the pure
results of reading their files, and Dask computes them again elsewhere.

- ``connection.py``: registering, reaching and checking a cluster;
- ``parquet.py``: the fact's files and the query each worker runs on its file;
- ``data.py``: the training data, one partition per file (``cluster_data``, ``build_partition``);
- ``remote.py``: the partitions as the workers hold them (``RemotePartitions``).

>>> from ilargi_db.cluster import parquet_files   # doctest: +SKIP
"""

from ilargi_db.cluster.connection import (
    CONNECT_SECONDS,
    build_id,
    check_versions,
    connect_cluster,
    register_cluster,
    registered_cluster,
    registered_clusters,
    unregister_cluster,
)
from ilargi_db.cluster.data import PartitionLabels, SharedRead, build_partition, cluster_data
from ilargi_db.cluster.parquet import parquet_files
from ilargi_db.cluster.remote import RemotePartitions

__all__ = [
    "CONNECT_SECONDS",
    "PartitionLabels",
    "RemotePartitions",
    "SharedRead",
    "build_id",
    "build_partition",
    "check_versions",
    "cluster_data",
    "connect_cluster",
    "parquet_files",
    "register_cluster",
    "registered_cluster",
    "registered_clusters",
    "unregister_cluster",
]
