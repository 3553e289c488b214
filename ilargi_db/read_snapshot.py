"""One committed state of the database for every read of one job, in a transaction that cannot write.

ilargi_db reads a training query several times (statistics, one scan per source, the key-only join, or the
materialized join). Between two autocommit statements another connection may commit a change, and a model would
then mix two states of a table. :class:`ReadSnapshot` runs them in one transaction instead: DuckDB's MVCC gives every
statement of a transaction the snapshot it began with.

The transaction is ``BEGIN TRANSACTION READ ONLY`` and always ends with ROLLBACK: DuckDB refuses any write in it
(a data-modifying CTE the planner missed, a sequence's ``nextval``), and there is nothing to commit. A caller that
is already inside a transaction keeps it: ilargi_db reads in it and neither begins, commits nor rolls it back
(the planner's refusal of writing statements is then the only wall).
"""

from __future__ import annotations

import weakref

import duckdb

from ilargi_db.errors import PlanError

# The snapshot ilargi_db holds open on a connection: nested jobs (train plans, explain plans...) read in it.
_OPEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def in_transaction(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether ``con`` is inside a transaction: in autocommit every statement gets a transaction id of its own."""
    first = con.execute("SELECT txid_current()").fetchall()[0][0]
    return con.execute("SELECT txid_current()").fetchall()[0][0] == first


def roll_back(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back the open transaction, if any: DuckDB ends it itself when COMMIT fails (a full disk), and its
    "no transaction is active" (or any error of the rollback) must not replace the error that says why the write
    failed."""
    try:
        con.rollback()
    except duckdb.Error:
        pass  # already rolled back by DuckDB; the caller raises the first error


class ReadSnapshot:
    """Every read on ``con`` between :meth:`open` and :meth:`close` sees one committed state, and cannot write.

    A context manager (``with ReadSnapshot(con):``); :meth:`close` may also end it early (before a long fit
    that reads nothing) and is idempotent.

    >>> import duckdb
    >>> con = duckdb.connect()
    >>> _ = con.execute("CREATE TABLE t AS SELECT 1 AS x")
    >>> with ReadSnapshot(con):  # doctest: +ELLIPSIS
    ...     con.execute("DELETE FROM t")
    Traceback (most recent call last):
    ...
    _duckdb.TransactionException: TransactionContext Error: Cannot write to database ...read-only mode
    >>> con.execute("SELECT count(*) FROM t").fetchall()
    [(1,)]
    """

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        if not isinstance(con, duckdb.DuckDBPyConnection):  # the first thing a job does with it
            raise PlanError(f"con must be a DuckDB connection (duckdb.connect() or ilargi_db.connect()), got {con!r}.")
        self.con = con
        self.owned = False  # ilargi_db began the transaction, so it ends it

    def open(self) -> ReadSnapshot:
        if self.owned or self.con in _OPEN or in_transaction(self.con):
            return self  # ours already, or the caller's (or an outer job's): read in it
        self.con.execute("BEGIN TRANSACTION READ ONLY")
        self.owned = True
        _OPEN[self.con] = self
        return self

    def renew(self) -> None:
        """Start a fresh snapshot: a statement that failed has aborted the transaction (ours only)."""
        if self.owned:
            self.con.execute("ROLLBACK")
            self.con.execute("BEGIN TRANSACTION READ ONLY")

    def close(self) -> None:
        if not self.owned:
            return
        self.owned = False
        _OPEN.pop(self.con, None)
        try:
            self.con.execute("ROLLBACK")
        except duckdb.Error:  # the connection is closed: a read-only transaction has nothing to undo anyway
            pass

    def __enter__(self) -> ReadSnapshot:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def renew_snapshot(con: duckdb.DuckDBPyConnection) -> None:
    """After a failed statement (which aborts the transaction), read on in a fresh snapshot, if ilargi_db holds one."""
    snapshot = _OPEN.get(con)
    if snapshot is not None:
        snapshot.renew()


__all__ = ["ReadSnapshot", "in_transaction", "renew_snapshot", "roll_back"]
