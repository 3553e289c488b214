"""The model registry: schema ``ilargi`` inside the user's database (DDL in ``sql/registry.sql``).

Saving a model writes its registry row, its category weights and its
``N_predict`` macros in one transaction: a failure anywhere leaves the
registry (and the macros) exactly as they were.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb

from ilargi_db.backend.host_memory import give_back_freed_memory
from ilargi_db.database_identity import is_read_only
from ilargi_db.errors import (
    DamagedModelError,
    IlargiError,
    ModelNotFoundError,
    literal,
    worded,
)
from ilargi_db.limits import NodeBounded
from ilargi_db.models.catalog import MacroForm, algorithm_facts
from ilargi_db.read_snapshot import roll_back
from ilargi_db.sql_functions.macros import (
    MACRO_SCHEMA,
    GroupedMacroWriter,
    MacroWriter,
    macro_marker,
    model_macro_names,
    qualified_macro,
)
from ilargi_db.sql_functions.registry_schema import check_registry, ensure_registry
from ilargi_db.sql_functions.tree_leaf_masks import (
    TREE_LEAVES_TABLE,
    GroupedTreeLeafMaskWriter,
    TreeLeafMaskWriter,
    writes_leaf_masks,
)
from ilargi_db.sql_functions.tree_macros import TreeMacroWriter, check_macro_size
from ilargi_db.sql_text import quote_string
from ilargi_db.trained_model import GroupedModel, TrainedModel

MODEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def check_model_name(name: Any) -> str:
    """The model name, lower-cased, if it is a plain SQL identifier (it names macros)."""
    if not isinstance(name, str) or not MODEL_NAME.fullmatch(name):
        raise IlargiError(
            f"model name {literal(name)} is not a plain identifier: use letters, digits and underscores, "
            "starting with a letter or underscore, at most 63 characters (e.g. 'delay_model')."
        )
    return name.lower()


def check_writable(con: duckdb.DuckDBPyConnection) -> None:
    """Refuse up front (not after training) when the database cannot store a model."""
    if is_read_only(con):
        raise IlargiError(
            "the database is open read-only, so models cannot be stored or dropped: reopen it without "
            "read_only=True (models already stored can still be evaluated and their macros used)."
        )


@dataclass(frozen=True)
class StoreCheck:
    """What :func:`check_store` found: the database writable, and the registry ilargi_db's own."""

    registry_complete: bool  # every object of the registry is there (False: it is created with the first model)


def check_store(con: duckdb.DuckDBPyConnection) -> StoreCheck:
    """Refuse a read-only database or someone else's ``ilargi.models`` (see :func:`check_registry`), once
    per save: the SQL functions check before training and hand the result to :func:`save_models`."""
    check_writable(con)
    return StoreCheck(registry_complete=check_registry(con))


def check_macro_parameters(feature_names: list[str]) -> None:
    """Feature names become the macro's parameters: they must differ (DuckDB ignores case)."""
    seen: dict[str, str] = {}
    for name in feature_names:
        if name.lower() in seen:
            raise IlargiError(
                f"features {seen[name.lower()]!r} and {name!r} have the same name (ignoring case), and feature "
                "names become the model macro's parameters: give each column a unique alias (e.g. d.x AS dest_x)."
            )
        seen[name.lower()] = name


def _has_registry(con: duckdb.DuckDBPyConnection, table: str = "models") -> bool:
    """Whether this database's schema ilargi holds ``table`` (the registry's ``models``, unless told)."""
    found = con.execute(
        "SELECT count(*) FROM system.main.duckdb_tables() WHERE schema_name = 'ilargi' AND table_name = ? "
        "AND database_name = system.main.current_database()",
        [table],
    ).fetchall()[0][0]
    return bool(found)


def _marked_macros(con: duckdb.DuckDBPyConnection, name: str) -> set[str]:
    """The macros, lower case, that ilargi_db made for model ``name``: those of the database's MACRO_SCHEMA carrying
    its marker (``COMMENT ON MACRO``, set when they were created)."""
    found = con.execute(
        "SELECT DISTINCT lower(function_name) FROM system.main.duckdb_functions() WHERE function_type = 'macro' "
        "AND database_name = system.main.current_database() AND schema_name = ? AND comment = ?",
        [MACRO_SCHEMA, macro_marker(name)],
    ).fetchall()
    return {f for (f,) in found}


def _macros_of(con: duckdb.DuckDBPyConnection, name: str, marked: set[str] | None = None) -> set[str]:
    """Every macro some version of model ``name`` created that still exists: those its rows list that a model of
    that name and algorithm makes, and that carry the model's marker (a row edited, or from a file made elsewhere,
    names no user's function to drop); ``marked``: :func:`_marked_macros`, when the caller has read it."""
    listed = con.execute("SELECT algorithm, macros FROM ilargi.models WHERE name = ?", [name]).fetchall()
    allowed = {
        m.lower()
        for algorithm, macros in listed
        for m in macros or []
        if m.lower() in model_macro_names(name, algorithm)
    }
    return allowed & (_marked_macros(con, name) if marked is None else marked)


def _foreign_functions(con: duckdb.DuckDBPyConnection, macros: list[str], ours: set[str]) -> list[str]:
    """Functions with a macro's name that are not the model's own macros ``ours`` (:func:`_marked_macros`: never
    overwrite them)."""
    taken = con.execute(
        # Built-ins, TEMP functions (both answer for the name first) and the macros' own schema (MACRO_SCHEMA of the
        # database in use); a function of another schema or database of the name is not replaced, nor called.
        "SELECT DISTINCT database_name, function_name FROM system.main.duckdb_functions() WHERE lower(function_name) "
        "IN (SELECT lower(unnest(?::VARCHAR[]))) AND (database_name IN ('system', 'temp') OR "
        "(database_name = system.main.current_database() AND schema_name = ?))",
        [macros, MACRO_SCHEMA],
    ).fetchall()
    return sorted(f for database, f in taken if database in ("system", "temp") or f.lower() not in ours)


def _concurrent_save(err: duckdb.Error) -> bool:
    """Whether ``err`` says another connection wrote the same rows first: a write-write conflict, or the same
    version inserted (the other committed before this one inserted); not a COMMIT that could not write."""
    words = str(err).lower()
    if isinstance(err, duckdb.ConstraintException):
        return "duplicate key" in words
    return "conflict" in words and "failed to commit" not in words


def save_model(con: duckdb.DuckDBPyConnection, name: str, model: TrainedModel) -> int:
    """Store a model from :func:`ilargi_db.train` as the next version of ``name`` and create its macros.

    Returns the new version number. The macros (``name_predict``, and
    ``name_predict_class`` for logistic regression) take the model's features in
    training order and work from any DuckDB client.
    """
    (version,) = save_models(con, [(name, model)])
    return version


def save_models(
    con: duckdb.DuckDBPyConnection, named: list[tuple[str, TrainedModel]], checked: StoreCheck | None = None
) -> list[int]:
    """Store each ``(name, model)`` as :func:`save_model` does, all in one transaction: all or none.

    ``checked`` is :func:`check_store`'s finding when the caller checked before training.
    """
    named = [(check_model_name(name), model) for name, model in named]
    for _, model in named:
        if not isinstance(model, TrainedModel):
            raise IlargiError("save_model needs a model returned by ilargi_db.train() (or ilargi_db.load_model()).")
    for _, model in named:
        grouping = [model.group_by_] if isinstance(model, GroupedModel) else []  # its macros' last parameter
        check_macro_parameters([s.name for s in model.encoder_.specs_] + grouping)
        if isinstance(model.estimator_, NodeBounded):  # one macro: its nodes of every group counted together
            if isinstance(model, GroupedModel):
                check_macro_size(list(model.models_.values()), grouped=True, group_type=model.group_type_)
            else:
                check_macro_size([model])
    # Someone else's ilargi.models is refused before anything is written.
    complete = (check_store(con) if checked is None else checked).registry_complete
    name = ", ".join(n for n, _ in named)
    con.begin()
    try:
        if not complete:  # never installed here: the registry is created with the model, in its transaction
            ensure_registry(con)
        versions = [_save(con, n, model) for n, model in named]
        con.commit()
    except (duckdb.TransactionException, duckdb.ConstraintException) as err:
        roll_back(con)
        if not _concurrent_save(err):
            raise  # e.g. the disk full at COMMIT: the database's own words
        also = "" if complete else " or created the model registry"
        raise IlargiError(
            f"another connection saved model {name!r}{also} at the same time, so nothing was saved: try again "
            f"({str(err).replace(chr(92) + '0', '.')})."
        ) from None
    except BaseException:
        roll_back(con)
        raise
    for (n, model), version in zip(named, versions):  # the model knows where it is stored once it is
        model.name_, model.version_ = n, version
    return versions


def _tree_writer(name: str, version: int, model: Any, database: str) -> Any:
    """Leaf masks where every tree fits a BIGINT's bits, a ``CASE`` per split else (``tree_macros.py``)."""
    writer = TreeLeafMaskWriter if writes_leaf_masks([model.trees_]) else TreeMacroWriter
    return writer(name, version, model, database)


def _group_tree_writer(name: str, version: int, model: Any, database: str) -> Any:
    """Every group's leaf masks in one lookup where every group's trees fit them and the group column's values are
    told apart by their type's equality, a ``CASE`` on the group else."""
    if writes_leaf_masks([one.trees_ for one in model.models_.values()], grouped=True, group_type=model.group_type_):
        return GroupedTreeLeafMaskWriter(name, version, model, database)
    return GroupedMacroWriter(name, version, model, database, TreeMacroWriter)


def _group_writer(name: str, version: int, model: Any, database: str) -> Any:
    """Each group's body by :class:`MacroWriter`, chosen by a ``CASE`` on the group column."""
    return GroupedMacroWriter(name, version, model, database, MacroWriter)


# Who writes the macros of each form (the catalog entry's ``macro``): for a single model, and for a model per
# group (one macro over every group's, dispatching on the group column).
Writer = Callable[[str, int, Any, str], Any]
SINGLE_WRITERS: dict[MacroForm | None, Writer] = {
    **dict.fromkeys((*MacroWriter.FORMS, None), MacroWriter),
    MacroForm.TREES: _tree_writer,
}
GROUP_WRITERS: dict[MacroForm | None, Writer] = {
    **dict.fromkeys((*MacroWriter.FORMS, None), _group_writer),
    MacroForm.TREES: _group_tree_writer,
}


def macro_writer(name: str, version: int, model: Any, database: str) -> Any:
    """The writer of ``model``'s macros, as version ``version`` of model ``name`` in ``database``."""
    writers = GROUP_WRITERS if isinstance(model, GroupedModel) else SINGLE_WRITERS
    return writers[algorithm_facts(model.algorithm_).macro](name, version, model, database)


def _save(con: duckdb.DuckDBPyConnection, name: str, model: Any) -> int:
    """The writes of :func:`save_model`, inside its transaction."""
    version = con.execute("SELECT coalesce(max(version), 0) + 1 FROM ilargi.models WHERE name = ?", [name]).fetchall()
    version = int(version[0][0])
    (database,) = con.execute("SELECT system.main.current_database()").fetchall()[0]
    writer = macro_writer(name, version, model, database)
    statements = writer.statements()
    marked = _marked_macros(con, name)  # one read of the catalog for both checks below
    foreign = _foreign_functions(con, list(statements), marked)
    if foreign:
        raise IlargiError(
            f"a function named {', '.join(foreign)} already exists and is not model {name!r}'s (its macros carry "
            f"the comment {macro_marker(name)!r}): choose another model name, or DROP MACRO that function first if "
            "it is yours to lose."
        )
    record = {"name": name, "version": version, **model.to_record(), "macros": list(statements)}
    give_back_freed_memory()  # writing the JSON freed several times its size, before DuckDB copies it
    con.execute(
        f"INSERT INTO ilargi.models ({', '.join(record)}) VALUES ({', '.join('?' * len(record))})",
        list(record.values()),
    )
    for table, rows in writer.registry_rows().items():
        if rows.num_rows:
            con.register("__ilargi_rows", rows)
            try:
                con.execute(f"INSERT INTO ilargi.{table} SELECT * FROM __ilargi_rows")
            finally:
                con.unregister("__ilargi_rows")
    for stale in sorted(_macros_of(con, name, marked) - set(statements)):  # e.g. a former logistic model's _class
        con.execute(f"DROP MACRO IF EXISTS {qualified_macro(database, stale)}")
    for macro, statement in statements.items():
        con.execute(statement)
        con.execute(f"COMMENT ON MACRO {qualified_macro(database, macro)} IS {quote_string(macro_marker(name))}")
    model.macros_ = list(statements)
    return version


def load_model(con: duckdb.DuckDBPyConnection, name: str, version: int | None = None) -> TrainedModel:
    """The model ``name`` (its newest version unless ``version`` is given), ready for predict/evaluate."""
    name = check_model_name(name)
    row = None
    if _has_registry(con):
        sql = "SELECT * FROM ilargi.models WHERE name = ?"
        args: list[Any] = [name]
        if version is not None:
            sql += " AND version = ?"
            args.append(int(version))
        found = con.execute(sql + " ORDER BY version DESC LIMIT 1", args)
        columns = [d[0] for d in found.description]
        rows = found.fetchall()
        row = dict(zip(columns, rows[0])) if rows else None
    if row is None:
        which = f"model {name!r}" + (f" version {version}" if version is not None else "")
        raise ModelNotFoundError(
            f"{which} does not exist: train it with ilargi_train(...) first, or list the models with "
            "SELECT name, version FROM ilargi.models."
        )
    try:
        model = TrainedModel.from_record(row)
    except DamagedModelError as err:
        # A row edited by hand, or a file from elsewhere: say which row, not where the rebuild stumbled.
        drop = worded(f"ilargi_db.drop_model(con, {name!r})", f"ilargi_drop_model('{name}')")
        raise DamagedModelError(
            f"model {name!r} version {row['version']} in ilargi.models is damaged ({err.why}): train it again, "
            f"or drop it with {drop}.",
            err.why,
        ) from None
    macros = list(row["macros"] or [])
    made = model_macro_names(name, row["algorithm"])
    if any(not isinstance(m, str) or m.lower() not in made for m in macros):  # prediction_sql calls macros_[0]
        drop = worded(f"ilargi_db.drop_model(con, {name!r})", f"ilargi_drop_model('{name}')")
        raise DamagedModelError(
            f"model {name!r} version {row['version']} in ilargi.models is damaged (its macros {macros} are not "
            f"those a {row['algorithm']} model named {name!r} makes: {sorted(made)}): train it again, or drop it "
            f"with {drop}.",
            "macros",
        )
    model.name_, model.version_, model.macros_ = row["name"], int(row["version"]), macros
    return model


def drop_model(con: duckdb.DuckDBPyConnection, name: str) -> int:
    """Delete every version of model ``name`` and its macros; return how many versions there were."""
    name = check_model_name(name)
    check_writable(con)
    versions = 0
    if _has_registry(con):
        versions = con.execute("SELECT count(*) FROM ilargi.models WHERE name = ?", [name]).fetchall()[0][0]
    if not versions:
        raise ModelNotFoundError(
            f"model {name!r} does not exist, so there is nothing to drop: "
            "SELECT name, version FROM ilargi.models lists the models."
        )
    con.begin()
    try:
        (database,) = con.execute("SELECT system.main.current_database()").fetchall()[0]
        for macro in sorted(_macros_of(con, name)):
            con.execute(f"DROP MACRO IF EXISTS {qualified_macro(database, macro)}")
        for table in ("category_weights", TREE_LEAVES_TABLE):
            if _has_registry(con, table):  # a registry of an earlier ilargi_db lacks ilargi.tree_leaves
                con.execute(f"DELETE FROM ilargi.{table} WHERE model = ?", [name])
        con.execute("DELETE FROM ilargi.models WHERE name = ?", [name])
        con.commit()
    except BaseException:
        roll_back(con)
        raise
    return int(versions)
