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
