"""ilargi_db inside DuckDB: readying connections (and, later, the SQL functions)."""

from ilargi_db.sql_functions.install import connect, install

__all__ = ["connect", "install"]
