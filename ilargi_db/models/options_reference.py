"""Every option a training takes, read from where each is declared: the train settings' table
(:data:`~ilargi_db.models.catalog.TRAIN_SETTINGS`) and each estimator's parameters (its signature's default, its
``_parameter_constraints``, its docstring's ``Parameters`` section).

``ilargi options``, :func:`ilargi_db.options` and ``docs/options.md`` print these rows; the checks that refuse a
bad value read the same declarations, so the reference cannot drift from what is accepted.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from typing import Any

from ilargi_db.models.catalog import NAMES, TRAIN_SETTINGS, check_algorithm, estimator_class
from ilargi_db.models.estimator import named_constraint

SETTINGS_SECTION = "train settings"  # the rows of TRAIN_SETTINGS, which every algorithm takes


@dataclass(frozen=True)
class Option:
    """One option: its name, the values it accepts in words, its default as JSON writes it, and what it does."""

    name: str
    accepts: str
    default: str
    meaning: str


def _accepted(constraint: Any) -> str:
    """One constraint in the words of an options JSON (which the Python keywords share)."""
    if (named := named_constraint(constraint)) is not None:
        return named.in_options
    if isinstance(constraint, type):
        return f"a {constraint.__name__}"
    return constraint.in_options()


def _as_json(value: Any) -> str:
    try:
        return json.dumps(value)
    except TypeError:
        return repr(value)


def _parameter_meanings(cls: type) -> dict[str, str]:
    """Each parameter's description in ``cls``'s numpydoc ``Parameters`` section, on one line."""
    doc = inspect.getdoc(cls) or ""
    section = re.search(r"^Parameters\n-+\n(.*?)(?:\n\n[A-Z][a-z]+\n-+\n|\Z)", doc, re.S | re.M)
    meanings: dict[str, str] = {}
    name = None
    for line in (section.group(1) if section else "").splitlines():
        header = re.match(r"^(\w+) :", line)
        if header:
            name = header.group(1)
            meanings[name] = ""
        elif name is not None and line.startswith(" ") and line.strip():
            meanings[name] = f"{meanings[name]} {line.strip()}".strip()
    return meanings


def settings_options() -> list[Option]:
    """The settings ``train`` takes besides the estimator's parameters, in its signature's order."""
    return [Option(s.name, s.json_expected(), _as_json(s.default), s.doc) for s in TRAIN_SETTINGS]


def algorithm_options(algorithm: str) -> list[Option]:
    """``algorithm``'s estimator parameters, in its signature's order."""
    cls = estimator_class(algorithm)
    meanings = _parameter_meanings(cls)
    constraints = getattr(cls, "_parameter_constraints", {})
    rows = []
    for name, parameter in inspect.signature(cls).parameters.items():
        accepts = " or ".join(_accepted(c) for c in constraints.get(name, [])) or "any value"
        rows.append(Option(name, accepts, _as_json(parameter.default), meanings.get(name, "")))
    return rows


def options(algorithm: str | None = None) -> list[Option]:
    """The options a training of ``algorithm`` takes: its estimator's parameters, then the train settings (only
    those without ``algorithm``).

    >>> import ilargi_db
    >>> [(o.name, o.default) for o in ilargi_db.options("kmeans")][:2]
    [('n_clusters', '8'), ('init', '"k-means++"')]
    """
    return [*(algorithm_options(check_algorithm(algorithm)) if algorithm is not None else []), *settings_options()]


def options_markdown() -> str:
    """``docs/options.md``: the train settings, then every algorithm's parameters, each a Markdown table."""

    def table(rows: list[Option]) -> list[str]:
        cells = [[f"`{o.name}`", o.accepts, f"`{o.default}`", o.meaning] for o in rows]
        escaped = [[c.replace("|", "\\|") for c in row] for row in cells]
        return [
            "| option | accepts | default | meaning |",
            "|---|---|---|---|",
            *("| " + " | ".join(r) + " |" for r in escaped),
        ]

    lines = [
        "# Options",
        "",
        "Printed by `ilargi options --reference` from the declarations the checks read: the train settings' table",
        "and each estimator's parameters (`tests/test_models_options_reference.py` keeps this file equal to them).",
        "In Python they are keyword arguments of `ilargi_db.train`; in SQL and on the command line, keys of the",
        "options JSON. `ilargi options ALGORITHM` prints one algorithm's, with the train settings.",
        "",
        f"## {SETTINGS_SECTION}",
        "",
        "Every algorithm takes these besides its own parameters.",
        "",
        *table(settings_options()),
    ]
    for algorithm in NAMES:
        lines += [
            "",
            f"## {algorithm}",
            "",
            f"`{estimator_class(algorithm).__name__}`'s parameters.",
            "",
            *table(algorithm_options(algorithm)),
        ]
    return "\n".join(lines) + "\n"
