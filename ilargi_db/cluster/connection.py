"""Reaching a Dask cluster: the clusters the Python host registered (the only ones SQL can name), connecting
with a deadline that holds, and refusing workers that run another build of ilargi_db.

Dask's protocol unpickles what the scheduler sends, so connecting to an address is running its code: that
choice is the host's, never a SQL string's.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import duckdb

from ilargi_db.errors import IlargiError
from ilargi_db.interruption import check_interrupted

CONNECT_SECONDS = 5.0  # the deadline for reaching a scheduler: a silent listener is refused, not waited on
# name -> client or address, registered by the Python host: the only clusters SQL can reach
_CLUSTERS: dict[str, Any] = {}
_CLUSTERS_LOCK = threading.Lock()


def register_cluster(name: str, cluster: Any) -> None:
    """Let SQL callers of this process train on ``cluster`` as ``"cluster": name`` in ``ilargi_train``'s options.

    ``cluster`` is a ``dask.distributed.Client`` or a scheduler address (``"tcp://host:8786"``). A SQL string
    never chooses where the process connects: only the names the host registered here can be used from SQL,
    and only on a connection whose ``enable_external_access`` is on.

    >>> register_cluster("nightly", "tcp://10.0.0.5:8786")
    >>> registered_clusters()
    ['nightly']
    >>> unregister_cluster("nightly")
    """
    if not isinstance(name, str) or not name.strip():
        raise IlargiError(f"a cluster's name must be a non-empty string, got {name!r}.")
    _check_cluster_value(cluster)
    with _CLUSTERS_LOCK:
        _CLUSTERS[name] = cluster


def unregister_cluster(name: str) -> None:
    """Forget the cluster registered as ``name`` (SQL callers can no longer name it)."""
    with _CLUSTERS_LOCK:
        _CLUSTERS.pop(name, None)


def registered_clusters() -> list[str]:
    """The names SQL callers may give as ``"cluster"``, sorted."""
    with _CLUSTERS_LOCK:
        return sorted(_CLUSTERS)


def registered_cluster(con: duckdb.DuckDBPyConnection, name: Any) -> Any:
    """The client or address the host registered as ``name``, for a SQL caller of ``con``; or a clear refusal.

    Refused where DuckDB's ``enable_external_access`` is off: the caller's sandbox covers the cluster too.
    """
    external = con.execute("SELECT system.main.current_setting('enable_external_access')").fetchall()[0][0]
    if str(external).lower() in ("false", "0"):
        raise IlargiError(
            'the option "cluster" reaches other machines, and this connection has enable_external_access = false: '
            'train without "cluster", or from a connection that allows external access.'
        )
    with _CLUSTERS_LOCK:
        found = _CLUSTERS.get(name) if isinstance(name, str) else None
    if found is None:
        raise IlargiError(
            f'the option "cluster" names a cluster registered in this process, and none is registered as {name!r}: '
            "an address cannot be given here. From Python: ilargi_db.register_cluster('name', 'tcp://host:8786'), "
            'then pass "cluster": "name".'
        )
    return found


def _check_cluster_value(cluster: Any) -> None:
    if isinstance(cluster, str) and cluster.strip():
        return  # an address; connecting says what to install if Dask is missing
    try:
        from dask.distributed import Client
    except ImportError:
        Client = None  # noqa: N806
    if Client is None or not isinstance(cluster, Client):
        raise IlargiError(
            f"cluster must be a dask.distributed.Client or a scheduler address such as 'tcp://host:8786', "
            f"got {cluster!r}."
        )


def connect_cluster(cluster: Any, deadline: float = CONNECT_SECONDS) -> Any:
    """A ``dask.distributed.Client`` as given, or one connected to a scheduler address (``"tcp://host:8786"``).

    Connecting has a deadline that holds (a listener that never answers is refused after ``deadline`` seconds)
    and stops on :func:`~ilargi_db.interruption.interrupt_training`; whatever goes wrong on the way is an
    :class:`IlargiError` naming the address. Workers must run this build of ilargi_db (:func:`check_versions`).
    """
    try:
        from dask.distributed import Client
    except ImportError:
        raise IlargiError(
            "training on a cluster needs Dask: pip install 'ilargi_db[distributed]' (dask.distributed)."
        ) from None
    _check_cluster_value(cluster)
    if isinstance(cluster, Client):
        check_versions(cluster)
        return cluster
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def connect() -> None:  # on a thread of its own: Dask's own timeout does not hold against a silent listener
        try:
            client = Client(cluster, timeout=f"{deadline}s", set_as_default=False)
        except BaseException as err:  # noqa: BLE001 - reported below in the caller's terms
            outcome["error"] = err
        else:
            outcome["client"] = client
            if "abandoned" in outcome:
                client.close()
        finally:
            done.set()

    threading.Thread(target=connect, name="ilargi-connect-cluster", daemon=True).start()
    began = time.monotonic()
    while not done.wait(0.05):
        try:
            check_interrupted()
        except BaseException:
            outcome["abandoned"] = True
            raise
        if time.monotonic() - began > deadline:
            outcome["abandoned"] = True
            raise IlargiError(
                f"the Dask scheduler at {cluster!r} did not answer within {deadline:g} s: start it (dask scheduler) "
                "or check the address."
            )
    if "error" in outcome:
        err = outcome["error"]
        raise IlargiError(
            f"could not reach the Dask scheduler at {cluster!r} ({type(err).__name__}: {str(err)[:200]}): start it "
            "(dask scheduler) or check the address."
        ) from None
    client = outcome["client"]
    try:
        check_versions(client)
    except BaseException:
        client.close()
        raise
    return client


def build_id() -> str:
    """This build of ilargi_db: its version and a digest of its source files (an edited checkout differs)."""
    import ilargi_db

    return f"{ilargi_db.__version__}+{_source_digest()}"


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    root = Path(__file__).parent.parent
    digest = hashlib.blake2b(digest_size=8)
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def check_versions(client: Any) -> None:
    """Refuse a cluster whose workers run another build of ilargi_db: they would train another model."""
    mine = build_id()
    try:
        theirs = client.run(build_id)
    except Exception as err:  # noqa: BLE001 - a worker without ilargi_db, or one that cannot answer
        raise IlargiError(
            f"the cluster's workers could not report their ilargi_db build ({type(err).__name__}: {str(err)[:200]}): "
            "install this ilargi_db on every worker."
        ) from None
    if not theirs:
        raise IlargiError("the cluster has no workers: start some (dask worker <scheduler address>), then train.")
    other = {worker: found for worker, found in theirs.items() if found != mine}
    if other:
        worker, found = sorted(other.items())[0]
        raise IlargiError(
            f"{len(other)} of the cluster's {len(theirs)} worker(s) run another build of ilargi_db ({worker}: {found}; "
            f"this process: {mine}): install the same ilargi_db on the workers, or they would train another model."
        )
