"""ilargi_db inside DuckDB: the SQL functions, the model registry and models as SQL macros."""

from ilargi_db.sql_functions.install import connect, install
from ilargi_db.sql_functions.macros import prediction_sql
from ilargi_db.sql_functions.registry import ModelNotFoundError, drop_model, load_model, save_model

__all__ = ["ModelNotFoundError", "connect", "drop_model", "install", "load_model", "prediction_sql", "save_model"]
