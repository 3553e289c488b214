"""The ``ilargi sql`` shell: DuckDB's shell with ilargi_db's functions, its output modes and its dot commands,
and the short tables that ilargi_db's JSON summaries are shown as (``ilargi`` prints them too)."""

from ilargi_db.shell.render import (
    DEFAULT_MAXROWS,
    MAX_ROWS,
    MODES,
    Result,
    check_mode,
    json_value,
    readable,
    render,
    result_of,
    whole_number,
)
from ilargi_db.shell.session import DOT_COMMANDS, Session, box_width, clean_error, models_result
from ilargi_db.shell.summaries import CROSS_VALIDATION, scores_table, summarize

__all__ = [
    "CROSS_VALIDATION",
    "DEFAULT_MAXROWS",
    "DOT_COMMANDS",
    "MAX_ROWS",
    "MODES",
    "Result",
    "Session",
    "box_width",
    "check_mode",
    "clean_error",
    "json_value",
    "models_result",
    "readable",
    "render",
    "result_of",
    "scores_table",
    "summarize",
    "whole_number",
]
