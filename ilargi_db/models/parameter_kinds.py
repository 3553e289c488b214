"""The kinds of value each estimator parameter takes, read from its ``_parameter_constraints``
(:mod:`ilargi_db.models.estimator`'s constraint types).

scikit-learn's validation accepts ``True`` wherever an integer or a real number
is expected (``bool`` is an ``int`` in Python), so ``alpha=True`` would train
with ``alpha=1.0``. These checks refuse a boolean where the parameter takes no
boolean, in Python words for :func:`ilargi_db.train` and in JSON words for the
SQL functions' options (where every JSON type is checked); scikit-learn then
checks ranges and string choices.
"""

from __future__ import annotations

import json
from numbers import Integral, Real
from typing import Any

from ilargi_db.errors import IlargiError
from ilargi_db.models.estimator import Interval, StrOptions, named_constraint

# JSON kinds: "boolean", "integer", "number", "string", "null", "array".
_KIND_WORDS = {
    "boolean": "true or false",
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "null": "null",
    "array": "an array",
}


# The JSON kinds of the Python types a constraint may name.
_TYPE_KINDS = {
    bool: {"boolean"},
    str: {"string"},
    int: {"integer"},
    Integral: {"integer"},
    float: {"integer", "number"},
    Real: {"integer", "number"},
}


def _json_kinds(constraint: Any) -> set[str] | None:
    """The JSON kinds one constraint accepts; None when it is not one of the declarations ilargi_db uses."""
    if (named := named_constraint(constraint)) is not None:
        return set(named.json_kinds)
    if isinstance(constraint, (Interval, StrOptions)):
        return set(constraint.json_kinds())
    return _TYPE_KINDS.get(constraint) if isinstance(constraint, type) else None


def accepted_json_kinds(estimator: type, name: str) -> set[str] | None:
    """JSON kinds parameter ``name`` of ``estimator`` accepts (None: any, scikit-learn decides)."""
    kinds: set[str] = set()
    for constraint in getattr(estimator, "_parameter_constraints", {}).get(name, []):
        found = _json_kinds(constraint)
        if found is None:
            return None
        kinds |= found
    return kinds or None


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "array" if isinstance(value, list) else "object"


def _describe(kinds: set[str]) -> str:
    if "number" in kinds:
        kinds = kinds - {"integer"}  # every integer is a number
    return " or ".join(_KIND_WORDS[k] for k in sorted(kinds, key=list(_KIND_WORDS).index))


def check_python_types(algorithm: str, estimator: type, params: dict[str, Any]) -> None:
    """Refuse ``True``/``False`` for a parameter that takes no boolean (Python words)."""
    for name, value in params.items():
        kinds = accepted_json_kinds(estimator, name)
        if isinstance(value, bool) and kinds is not None and "boolean" not in kinds:
            expected = _describe(kinds - {"null"})
            raise IlargiError(
                f"parameter {name!r} of {algorithm} takes {expected}, got {value!r}: a bool is not a number here."
            )


def check_json_types(algorithm: str, estimator: type, options: dict[str, Any]) -> None:
    """Refuse an option whose JSON type the parameter does not take, naming the type it does (JSON words)."""
    for name, value in options.items():
        kinds = accepted_json_kinds(estimator, name)
        if kinds is None:
            continue
        kind = _json_kind(value)
        if kind in kinds or (kind == "integer" and "number" in kinds):
            continue
        expected = _describe(kinds)
        written = json.dumps(value)
        written = written if len(written) <= 60 else written[:57] + "..."
        raise IlargiError(f"option {name!r} of {algorithm} must be {expected} in JSON, got {written}.")
