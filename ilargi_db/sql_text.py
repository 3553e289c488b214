"""Names and text written into SQL: an identifier always quoted, a string as a literal, as DuckDB reads them.

Light (no sqlglot): every part that writes SQL quotes through these two, ``ilargi_db.connect()`` included.
"""

from __future__ import annotations


def quote_identifier(name: str) -> str:
    r"""``name`` as a DuckDB identifier (always quoted, a double quote doubled).

    >>> quote_identifier('a"b')
    '"a""b"'
    """
    return '"' + name.replace('"', '""') + '"'


def quote_string(text: str) -> str:
    r"""``text`` as a SQL string literal.

    >>> quote_string("it's")
    "'it''s'"
    """
    return "'" + text.replace("'", "''") + "'"


__all__ = ["quote_identifier", "quote_string"]
