"""The ``ilargi sql`` shell: statements and the DuckDB shell's dot commands, over one connection.

A ``Session`` holds what the dot commands set (the output mode, the row limit, where output goes, the
timer) and runs text in two ways: ``run_script`` as DuckDB runs a script (``-c``, ``-f``, ``.read``,
piped input: the first error stops it, naming the statement and its line) and ``interact`` as its
interactive shell (prompt, continuation lines until ``;``, errors printed and the shell goes on).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import duckdb

from ilargi_db.errors import IlargiError
from ilargi_db.interruption import is_interruption
from ilargi_db.shell.render import (
    DEFAULT_MAXROWS,
    MAX_ROWS,
    MODES,
    Result,
    check_mode,
    render,
    result_of,
    whole_number,
)
from ilargi_db.shell.summaries import metrics_line, scores_table, summarize, summary_kind

UDF_NOISE = re.compile(r"Invalid Input Error: Python exception occurred while executing the UDF: \w+: ")
PROMPT, CONTINUATION = "ilargi> ", "   ...> "
QUIT = (".quit", ".exit", "\\q")
MAX_READ_DEPTH = 16  # .read inside .read: deeper is a file reading itself
# The changed-row count of these statements is not shown, as in DuckDB's shell.
COUNTING = ("CREATE", "INSERT", "UPDATE", "DELETE")
MIN_WIDTH = 80  # DuckDB's narrowest box
MAX_WIDTH = 1_000_000  # a wider box is no longer read on a screen
# The dot commands that reach the file system: refused in --safe mode, as DuckDB's shell refuses them in -safe.
FILE_COMMANDS = (".read", ".output", ".once", ".open")
# DuckDB's sandbox, in the order it is set: a database that .open opens keeps it.
SANDBOX = ("allowed_directories", "allowed_paths", "enable_external_access", "lock_configuration")
ARGUMENT = re.compile(r"""\s*(?:"([^"]*)"|'([^']*)'|([^\s"']\S*))""")  # a dot command's argument, quoted or not

DOT_COMMANDS = {
    ".help": "this list",
    ".tables [PATTERN]": "your tables and views, schema-qualified (LIKE PATTERN), then ilargi_db's own",
    ".schema [TABLE]": "the CREATE statements (of one table or view: name or schema.name)",
    ".models": "the current models in ilargi's registry",
    ".mode [MODE]": f"the output mode: {', '.join(MODES)} (box by default)",
    ".maxrows [N]": f"the most rows box mode shows, the first and the last ones (default {DEFAULT_MAXROWS})",
    ".maxwidth [N]": f"the widest box, in characters (at least {MIN_WIDTH}; 0: the terminal's width, the default)",
    ".output [FILE]": "send results to FILE (written anew); .output alone: back to the terminal",
    ".once FILE": "send the next result to FILE",
    ".read FILE": "run the statements and dot commands of FILE",
    ".open [DB]": "close this database and open DB (a new in-memory one without DB)",
    ".timer on|off": "print each statement's run time",
    ".quit": "leave (also .exit, Ctrl-D)",
}


def clean_error(err: BaseException) -> str:
    """The message a user needs: without the UDF wrapper DuckDB puts around a Python exception."""
    return UDF_NOISE.sub("", str(err)).strip()


def box_width(out: IO[str], maxwidth: int = 0) -> int | None:
    """How wide a box may be: ``maxwidth`` (at least MIN_WIDTH), else the terminal's width; no limit when
    ``out`` is not a terminal (a file, a pipe), as in DuckDB's shell."""
    if maxwidth:
        return max(MIN_WIDTH, maxwidth)
    isatty = getattr(out, "isatty", None)
    if isatty is None or not isatty():
        return None
    return max(MIN_WIDTH, shutil.get_terminal_size().columns)


def _closed(text: str) -> bool:
    """Whether ``text`` ends outside a string, a quoted identifier and a comment, as DuckDB's tokenizer reads
    it (E'' escapes, $$ and $tag$ strings, nested /* */): a ';' put on a line after it stands alone."""
    probe = text + "\n;"
    tokens = duckdb.tokenize(probe)
    return tokens[-1] == (len(probe.encode()) - 1, duckdb.token_type.operator)  # offsets are UTF-8 bytes


def _last_token(text: str) -> str | None:
    """The last token of ``text`` that is not a comment (None: only comments and blanks)."""
    data = text.encode()
    tokens = duckdb.tokenize(text)
    ends = [start for start, _ in tokens[1:]] + [len(data)]
    for (start, kind), end in reversed(list(zip(tokens, ends))):
        if kind != duckdb.token_type.comment:
            return data[start:end].decode(errors="replace").strip()
    return None


def ends_statement(text: str) -> bool:
    """Whether ``text`` (lines typed so far) ends a statement: its last token that is not a comment is a
    ';' of its own (not one inside a string, a quoted name or a comment), and nothing is left open."""
    return _closed(text) and _last_token(text) == ";"


def inside_statement(text: str) -> bool:
    """Whether ``text`` (a script's lines since the last statement ended) leaves a statement unfinished,
    or a string or comment open: a dot command's line there is part of it."""
    return not _closed(text) or _last_token(text) not in (None, ";")


def dot_arguments(command: str) -> tuple[str, list[str]]:
    """A dot command's name and arguments, split at blanks; quotes ('...' or "...") wrap one with blanks."""
    name, *others = command.split(maxsplit=1)
    rest = others[0] if others else ""
    arguments: list[str] = []
    position = 0
    while rest[position:].strip():
        found = ARGUMENT.match(rest, position)
        if found is None:
            raise IlargiError(f"{name}: a quote is not closed in {rest.strip()!r}: close it (.read 'my job.sql').")
        arguments.append(next(group for group in found.groups() if group is not None))
        position = found.end()
    return name, arguments


class Session:
    """One shell over ``con``; ``connect`` opens the database of ``.open``.

    ``safe``: DuckDB's shell's safe mode (its ``-safe``): the dot commands that reach files are refused and
    ``con`` loses external access (``enable_external_access = false``: no file, extension or network from
    SQL), for good. Without it, those dot commands still honour the sandbox the connection is in.
    """

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        connect: Callable[[str], duckdb.DuckDBPyConnection],
        out: IO[str] | None = None,
        mode: str = "box",
        maxrows: int = DEFAULT_MAXROWS,
        safe: bool = False,
    ) -> None:
        if safe and _setting(con, "enable_external_access"):
            con.execute("SET enable_external_access = false")  # cannot be switched back on while it is open
        self.con = con
        self.safe = safe
        self.connect = connect
        self.terminal = out or sys.stdout
        self.out = self.terminal
        self.mode = check_mode(mode)
        self.maxrows = maxrows
        self.maxwidth = 0
        self.timer = False
        self.once = False  # .once: the output file is for the next result only
        self.depth = 0

    # -- output ---------------------------------------------------------------------------

    def write(self, text: str) -> None:
        print(text, file=self.out)

    def show(self, result: Result) -> None:
        self.write(render(result, self.mode, box_width(self.out, self.maxwidth)))
        if self.once:
            self.redirect(None)

    def redirect(self, path: str | None, once: bool = False) -> None:
        """Results to ``path`` (created anew) from now on, or for the next one; None: back to the terminal."""
        if self.out is not self.terminal:
            self.out.close()
        self.out, self.once = self.terminal, False
        if path is not None:
            try:
                self.out = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed by the next redirect)
            except OSError as err:
                why = f"cannot write to {path!r} ({err.strerror})"
                raise IlargiError(f"{why}: give a path in a writable folder.") from None
            self.once = once

    def close(self) -> None:
        self.redirect(None)

    # -- statements -----------------------------------------------------------------------

    def run_sql(self, sql: str, first: int = 1) -> int:
        """Run every statement of ``sql``, showing the results of those that return rows; how many ran.

        A failing statement stops the run with an error that names it: its number (counted from
        ``first``), its line in ``sql`` and its first line.
        """
        position, number = 0, first - 1
        for number, statement in enumerate(self.con.extract_statements(sql), start=first):
            text = statement.query.strip()
            found = sql.find(text[:40], position) if text else -1
            line = sql.count("\n", 0, found) + 1 if found >= 0 else None
            position = found + len(text) if found >= 0 else position
            start = time.perf_counter()
            try:
                cursor = self.con.execute(statement.query)
                if cursor.description is not None:
                    self.show_rows(cursor, counting=statement.type.name in COUNTING)
            except duckdb.Error as err:
                if is_interruption(err):
                    raise  # Ctrl-C: the caller stops the statement, not an error of it
                where = f"statement {number}" + (f" (line {line})" if line else "")
                head = text.splitlines()[0] if text else ""
                raise IlargiError(f"{where}, {head[:80]!r}: {clean_error(err)}") from None
            if self.timer:
                self.write(f"Run Time: {time.perf_counter() - start:.3f} s")
        return number - first + 1

    def show_rows(self, cursor: duckdb.DuckDBPyConnection, counting: bool = False) -> None:
        """The cursor's rows in the current mode; an ilargi_db function's JSON as its summary."""
        columns = [d[0] for d in cursor.description]
        if counting and columns == ["Count"]:
            cursor.fetchall()
            return
        result = result_of(cursor, self.maxrows if self.mode == "box" else None)
        summary = self.summary(result) if len(columns) == 1 and result.total == 1 else None
        if self.mode == "json" and summary is not None:
            self.write(json.dumps(json.loads(result.rows[0][0]), indent=2))  # the whole JSON, readable
            if self.once:
                self.redirect(None)
            return
        self.show(summary or scores_table(result))

    @staticmethod
    def summary(result: Result) -> Result | None:
        """The short table of a one-value result that is an ilargi_db function's JSON summary, else None."""
        value = result.rows[0][0]
        kind = summary_kind(result.columns[0], result.types[0] if result.types else None, value)
        if kind is None or not isinstance(value, str):
            return None
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return summarize(kind, parsed)

    def run_script(self, sql: str) -> bool:
        """Run ``sql`` as DuckDB's shell runs a script: statements, and dot commands on lines of their own
        between statements. Returns False when ``.quit`` ended it."""
        lines = sql.split("\n")
        number, start = 1, 0  # start: the line where the pending statements begin

        def flush(stop: int) -> None:
            nonlocal number
            text = "\n".join(lines[start:stop])
            if text.strip():  # led by blank lines, so that errors name the line in the whole script
                number += self.run_sql("\n" * start + text, first=number)

        for i, line in enumerate(lines):
            if not line.lstrip().startswith(".") or inside_statement("\n".join(lines[start:i])):
                continue  # SQL, or a line inside a statement (or inside a string or comment)
            flush(i)
            start = i + 1
            if not self.dot(line.strip()):
                return False
        flush(len(lines))
        return True

    # -- the interactive shell ------------------------------------------------------------

    def interact(self, read_line: Callable[[str], str] | None = None, errors: IO[str] | None = None) -> None:
        """Read statements (``read_line``, ``input`` by default) until EOF or .quit; a statement ends with
        ';'. An empty line at the prompt does nothing (as in DuckDB's shell); errors are printed and the
        shell goes on."""
        read_line = read_line or input  # looked up now: a test or an embedding program may replace it
        errors = errors or sys.stderr
        buffer: list[str] = []
        while True:
            try:
                line = read_line(CONTINUATION if buffer else PROMPT)
            except EOFError:
                self.write("")
                return
            except KeyboardInterrupt:
                self.write("")
                buffer = []
                continue
            if not buffer and not line.strip():
                continue
            try:
                if not buffer and line.strip().startswith("."):
                    if not self.dot(line.strip()):
                        return
                    continue
                buffer.append(line)
                sql = "\n".join(buffer)
                if ends_statement(sql):
                    buffer = []
                    self.run_sql(sql)
                elif not inside_statement(sql):
                    buffer = []  # only comments: the prompt stays, as in DuckDB's shell
            except (duckdb.Error, IlargiError) as err:
                print(f"Error: {clean_error(err)}", file=errors)
            except (KeyboardInterrupt, RuntimeError) as err:  # Ctrl-C stops the statement, not the shell
                if not is_interruption(err):  # DuckDB reports Ctrl-C as RuntimeError("Query interrupted")
                    raise
                print("Interrupted: the statement stopped, and ilargi_db's functions stored nothing.", file=errors)

    # -- dot commands ---------------------------------------------------------------------

    def dot(self, command: str) -> bool:
        """Run one dot command; False for .quit. Its arguments are checked before anything is done."""
        name = command.split(maxsplit=1)[0]
        if name in QUIT:
            return False
        if name not in DOTS:
            raise IlargiError(f"unknown command {name}: .help lists the dot commands.")
        handler, most = DOTS[name]
        _, arguments = dot_arguments(command)
        if len(arguments) > most:
            usage = next(usage for usage in DOT_COMMANDS if usage.split()[0] == name)
            quoting = " (quote a path with blanks: .read 'my job.sql')" if name in FILE_COMMANDS else ""
            raise IlargiError(f"Usage: {usage}{quoting}")
        if self.safe and name in FILE_COMMANDS:
            raise IlargiError(f"{name} cannot be used in --safe mode (it reaches the file system).")
        handler(self, arguments[0] if arguments else "")
        return True

    def reachable(self, command: str, path: str) -> str:
        """``path`` made absolute, once DuckDB's sandbox lets the connection reach it: with
        ``enable_external_access = false`` only what ``allowed_directories`` and ``allowed_paths`` name.
        DuckDB itself answers (the same check its file functions make), on the path that is then used."""
        if "\0" in path:
            raise IlargiError(f"{command}: the path {path!r} holds a NUL character: give a file's path.")
        full = os.path.abspath(path)
        if not _setting(self.con, "enable_external_access"):
            try:
                self.con.execute("SELECT 1 FROM system.main.glob(?) LIMIT 1", [full]).fetchall()
            except duckdb.PermissionException:
                raise IlargiError(
                    f"{command} cannot reach {path!r}: this connection has enable_external_access = false and the "
                    "path is not under its allowed_directories or allowed_paths."
                ) from None
        return full

    def help(self, argument: str) -> None:
        width = max(len(usage) for usage in DOT_COMMANDS) + 2
        self.write("\n".join(f"{usage:<{width}}{about}" for usage, about in DOT_COMMANDS.items()))

    def set_mode(self, argument: str) -> None:
        if not argument:
            self.write(f"current output mode: {self.mode}")
            return
        try:
            self.mode = check_mode(argument)
        except ValueError as err:
            raise IlargiError(str(err)) from None

    def set_maxrows(self, argument: str) -> None:
        if not argument:
            self.write(f"maxrows: {self.maxrows}")
            return
        self.maxrows = _number_argument(
            ".maxrows", argument, 1, MAX_ROWS, "a positive number of rows", f"say .maxrows 100 (at most {MAX_ROWS}; "
            ".mode csv writes every row)"
        )  # fmt: skip

    def set_maxwidth(self, argument: str) -> None:
        if not argument:
            self.write(f"maxwidth: {self.maxwidth or 'the terminal'}")
            return
        self.maxwidth = _number_argument(
            ".maxwidth", argument, 0, MAX_WIDTH, "a number of characters", f"say .maxwidth 120 (at most {MAX_WIDTH}; "
            "0: the terminal's width)"
        )  # fmt: skip

    def output(self, argument: str) -> None:
        self.redirect(self.reachable(".output", argument) if argument else None)

    def output_once(self, argument: str) -> None:
        if not argument:
            raise IlargiError("Usage: .once FILE (say .once results.csv)")
        self.redirect(self.reachable(".once", argument), once=True)

    def read(self, argument: str) -> None:
        if not argument:
            raise IlargiError("Usage: .read FILE (say .read job.sql)")
        try:
            sql = Path(self.reachable(".read", argument)).read_text(encoding="utf-8")
        except OSError as err:
            raise IlargiError(f"cannot read {argument!r} ({err.strerror}): give the path of a .sql file.") from None
        except UnicodeDecodeError:
            why = f"cannot read {argument!r}: it is not UTF-8 text"
            raise IlargiError(f"{why}; give the path of a .sql file.") from None
        if self.depth >= MAX_READ_DEPTH:
            raise IlargiError(f".read nested {MAX_READ_DEPTH} deep: does {argument!r} read itself?")
        self.depth += 1
        try:
            self.run_script(sql)
        except IlargiError as err:
            raise IlargiError(f"{argument}: {err}") from None
        finally:
            self.depth -= 1

    def open(self, argument: str) -> None:
        """Open ``argument`` (a new in-memory database without it) in the current one's sandbox."""
        path = ":memory:" if argument in ("", ":memory:") else self.reachable(".open", argument)
        sandbox = _sandbox(self.con)
        con = self.connect(path)  # opened first: on an error the current one stays
        try:
            for name, value in sandbox.items():  # in SANDBOX's order: the lock last
                con.execute(f"SET {name} = ?", [value])
        except BaseException:
            con.close()
            raise
        self.con.close()
        self.con = con

    def set_timer(self, argument: str) -> None:
        if argument not in ("on", "off"):
            raise IlargiError(f".timer takes on or off, got {_shown(argument)}: say .timer on.")
        self.timer = argument == "on"

    def tables(self, pattern: str) -> None:
        found = self.con.execute(
            "SELECT CASE WHEN database_name = system.main.current_database() THEN '' ELSE database_name || '.' END "
            "|| schema_name || '.' || name AS name, kind, "
            "schema_name = 'ilargi' AND database_name = system.main.current_database() "
            "FROM (SELECT database_name, schema_name, table_name AS name, 'table' AS kind FROM "
            "system.main.duckdb_tables() WHERE NOT internal UNION ALL SELECT database_name, schema_name, view_name, "
            "'view' FROM system.main.duckdb_views() WHERE NOT internal) "
            "WHERE ? = '' OR name LIKE ? OR schema_name || '.' || name LIKE ? ORDER BY 3, 1",
            [pattern, pattern, pattern],
        ).fetchall()
        yours = [(name, kind) for name, kind, own in found if not own]
        own = [name for name, _, is_own in found if is_own]
        if yours:
            self.show(Result(["name", "kind"], None, yours))
        else:
            self.write("no tables or views" + (f" like {pattern!r}" if pattern else ""))
        if own:
            self.write(f"ilargi_db's own: {', '.join(own)} (.models lists the models)")

    def schema(self, argument: str) -> None:
        found = self.con.execute(
            "SELECT sql FROM (SELECT schema_name, table_name AS name, sql FROM system.main.duckdb_tables() "
            "WHERE NOT internal UNION ALL SELECT schema_name, view_name, sql FROM system.main.duckdb_views() "
            "WHERE NOT internal) WHERE ? = '' OR name = ? OR schema_name || '.' || name = ?",
            [argument, argument, argument],
        ).fetchall()
        if not found:
            raise IlargiError(f"no table or view named {argument!r}: .tables lists them.")
        self.write("\n".join(sql for (sql,) in found))

    def models(self, argument: str) -> None:
        self.show(models_result(self.con))


def models_result(con: duckdb.DuckDBPyConnection, every_version: bool = False) -> Result:
    """The registry's models (the current versions, or all of them), metrics on one line each."""
    exists = con.execute(
        "SELECT count(*) FROM system.main.duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'ilargi' AND table_name = 'models'"
    ).fetchall()[0][0]
    columns = ["name", "version", "algorithm", "strategy", "rows", "target", "metrics", "created"]
    types = ["VARCHAR", "INTEGER", "VARCHAR", "VARCHAR", "BIGINT", "VARCHAR", "VARCHAR", "VARCHAR"]
    if not exists:
        return Result(columns, types, [], show_types=False)
    table = "ilargi.models" if every_version else "ilargi.current_models"
    found = con.execute(
        f"SELECT name, version, algorithm, strategy, n_rows, target, metrics, "
        f"strftime(created_at, '%Y-%m-%d %H:%M') FROM {table} ORDER BY name, version"
    ).fetchall()
    rows = [(*row[:6], _metrics_cell(row[6]), row[7]) for row in found]
    return Result(columns, types, rows, wrap=100, show_types=False)


def _metrics_cell(text: str) -> str:
    """A registry row's metrics as "r2 0.845, rmse 17.88"; a damaged value (edited by hand) says so."""
    try:
        metrics = json.loads(text)
    except (ValueError, RecursionError):
        metrics = None
    if not isinstance(metrics, dict):
        return "(damaged: not a JSON object)"
    return metrics_line(metrics)


def _number_argument(command: str, argument: str, low: int, high: int, what: str, example: str) -> int:
    """A dot command's whole-number argument from ``low`` to ``high``, or an error saying ``what`` it takes."""
    number = whole_number(argument, low, high)
    if number is None:
        raise IlargiError(f"{command} takes {what}, got {_shown(argument)}: {example}.")
    return number


def _shown(argument: str, most: int = 40) -> str:
    """An argument quoted in an error message, cut after ``most`` characters (it may be a pasted wall)."""
    return repr(argument if len(argument) <= most else argument[:most] + "…")


def _setting(con: duckdb.DuckDBPyConnection, name: str) -> Any:
    return con.execute("SELECT system.main.current_setting(?)", [name]).fetchall()[0][0]


def _sandbox(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The sandbox settings of ``con`` to set on a database .open opens; none where there is no sandbox."""
    settings = {name: _setting(con, name) for name in SANDBOX}
    if settings["enable_external_access"] and not settings["lock_configuration"]:
        return {}
    if settings["enable_external_access"]:  # locked only: the allowed lists mean nothing while access is on
        return {"lock_configuration": True}
    return settings


# Each dot command's handler and the most arguments it takes.
DOTS: dict[str, tuple[Callable[[Session, str], Any], int]] = {
    ".help": (Session.help, 0),
    ".tables": (Session.tables, 1),
    ".schema": (Session.schema, 1),
    ".models": (Session.models, 0),
    ".mode": (Session.set_mode, 1),
    ".maxrows": (Session.set_maxrows, 1),
    ".maxwidth": (Session.set_maxwidth, 1),
    ".output": (Session.output, 1),
    ".once": (Session.output_once, 1),
    ".read": (Session.read, 1),
    ".open": (Session.open, 1),
    ".timer": (Session.set_timer, 1),
}
