"""The layout rules of docs/architecture.md, checked: tests named for their part, the pipeline's phases small,
every exception in ilargi_db.errors."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ilargi_db"
PARTS = {p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()} - {"__init__"}
DOCUMENTATION = {"readme", "examples", "benchmarks", "architecture"}  # tests of the repository, not of a part


def _parts_imported(tree: ast.Module, own: str) -> set[str]:
    found = {
        node.module.split(".")[1]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ilargi_db.")
    }
    return found - {own}


def test_every_test_file_is_named_for_the_part_it_specifies():
    names = [p.stem.removeprefix("test_") for p in Path(__file__).parent.glob("test_*.py")]
    strays = [n for n in names if not any(n == part or n.startswith(part + "_") for part in PARTS | DOCUMENTATION)]
    assert not strays, f"name these tests/test_<part>[_<what>].py, a part being one of {sorted(PARTS)}"


@pytest.mark.parametrize("module", sorted((PACKAGE / "pipeline").glob("*.py")), ids=lambda p: p.name)
def test_each_phase_module_is_small(module):
    text = module.read_text()
    tree = ast.parse(text)
    assert len(text.splitlines()) <= 600
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert all(f.end_lineno - f.lineno + 1 <= 100 for f in functions)
    assert len(_parts_imported(tree, "pipeline")) <= 8


def test_every_exception_lives_in_errors():
    defined = []
    for module in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            bases = [getattr(b, "id", getattr(b, "attr", "")) for b in getattr(node, "bases", [])]
            if isinstance(node, ast.ClassDef) and any(b.endswith(("Error", "Exception", "Interrupt")) for b in bases):
                defined.append(f"{module.relative_to(PACKAGE)}:{node.name}")
    assert defined and all(d.startswith("errors.py:") for d in defined), defined


def test_every_public_name_of_the_stub_loads():
    """ilargi_db/__init__.pyi is the one list of the public API: each name it re-exports loads from ilargi_db."""
    import ilargi_db

    assert {"train", "normalize", "TrainedModel", "IlargiError"} <= set(ilargi_db.__all__)
    missing = [name for name in ilargi_db.__all__ if getattr(ilargi_db, name, None) is None]
    assert not missing


def _module_imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports at module level, type-only imports included (a function's own
    imports, made when it runs, are not)."""
    name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)

    visit(ast.parse(path.read_text()).body)
    return (found & modules) - {name}


def test_no_module_imports_itself_through_others():
    """No import circle between modules either (import_graph.py checks between parts), type-only ones included:
    each module can be read knowing only the modules below it."""
    paths = {
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
        for p in PACKAGE.rglob("*.py")
    }
    graph = {name: _module_imports(path, set(paths)) for name, path in paths.items()}
    done: set[str] = set()

    def walk(name: str, trail: list[str]) -> None:
        if name in trail:
            raise AssertionError(f"an import circle: {' -> '.join(trail[trail.index(name) :] + [name])}")
        if name in done:
            return
        for other in sorted(graph[name]):
            walk(other, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        walk(name, [])


def _catalog_words() -> set[str]:
    """The strings an algorithm's behaviour could be switched on: its name, and the values of the catalog's forms."""
    from ilargi_db.models.algorithm import Metrics
    from ilargi_db.models.catalog import NAMES, MacroForm, Rows

    return {*NAMES, *(m.value for kind in (Rows, MacroForm, Metrics) for m in kind)}


def _tested_strings(tree: ast.Module) -> list[tuple[int, str]]:
    """Each string constant a comparison (==, !=, in, is) tests against, with its line."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                strings = [i for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
                found += [(i.lineno, i.value) for i in strings]
    return found


# Where an algorithm's facts and behaviour are declared: the only modules that may test them by their strings.
ALGORITHMS_OWN = {"models/catalog.py", "models/algorithm.py"}
SAME_WORD = {("models/duhl.py", "logistic")}  # DuHL's own loss names (squared, logistic, hinge), not the macro form


def test_no_behaviour_is_switched_on_a_catalog_string():
    """The pipeline, the SQL functions and the registry ask the algorithm (its catalog entry's typed facts, its
    estimator's methods) and never compare an algorithm's name or a fact's string: a new algorithm is its
    module and a line in the catalog, with no switch to find elsewhere."""
    words = _catalog_words()
    switches = []
    for module in sorted(PACKAGE.rglob("*.py")):
        where = module.relative_to(PACKAGE).as_posix()
        if where not in ALGORITHMS_OWN:
            tree = ast.parse(module.read_text())
            tested = [(line, v) for line, v in _tested_strings(tree) if v in words and (where, v) not in SAME_WORD]
            switches += [f"{where}:{line} tests {value!r}" for line, value in tested]
    assert not switches, "ask the algorithm instead:\n" + "\n".join(switches)


def test_every_table_keyed_by_an_algorithms_facts_covers_every_value():
    """A new value of a fact (a row layout, a macro form, a kind of metrics) fails here, not with a KeyError at
    save or evaluate time: each table keyed by it names every member."""
    from ilargi_db.backend.compiled import KERNEL_MODULES
    from ilargi_db.models.algorithm import Metrics
    from ilargi_db.models.catalog import MacroForm, Rows
    from ilargi_db.pipeline.binned_readers import ROW_READERS
    from ilargi_db.pipeline.metrics import EVALUATIONS
    from ilargi_db.sql_functions.macros import MACRO_SUFFIXES, MacroWriter
    from ilargi_db.sql_functions.registry import GROUP_WRITERS, SINGLE_WRITERS
    from ilargi_db.trained_model import RESTORES

    assert set(ROW_READERS) == set(RESTORES) == set(KERNEL_MODULES) == set(Rows)  # KERNEL_MODULES: by value
    assert set(EVALUATIONS) == set(Metrics)
    forms = {*MacroForm, None}  # None: no macro (NMF)
    assert set(MACRO_SUFFIXES) == set(SINGLE_WRITERS) == set(GROUP_WRITERS) == forms
    assert set(MacroWriter.FORMS) | {MacroForm.TREES} == set(MacroForm)  # trees have writers of their own
