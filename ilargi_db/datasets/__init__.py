"""Example data: synthetic star schemas generated inside DuckDB (nothing is downloaded)."""

from ilargi_db.datasets.synthetic import StarSchema, make_star_schema

__all__ = ["StarSchema", "make_star_schema"]
