"""The options JSON of the SQL functions (and of the command line's ``--options``), read strictly and checked.

JSON, not SQL arguments: DuckDB's Python UDFs cannot be overloaded, so every setting beyond the required
arguments travels in one object. Duplicate keys, ``NaN``/``Infinity``, numbers beyond double precision and
deep nesting are refused with the option they concern; names and types are checked against the algorithm's
estimator and ``train``'s settings (models/catalog.py) before anything runs.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ilargi_db.errors import IlargiError
from ilargi_db.models.catalog import SETTINGS, TrainSetting, check_algorithm, check_known_settings, estimator_class
from ilargi_db.models.parameter_kinds import check_json_types


def parse_options(algorithm: str, options: str | None, allowed_extra: dict[str, TrainSetting] = SETTINGS) -> dict:
    """The options JSON object as a dict, refusing malformed JSON, keys the algorithm does not know, and
    settings of ``train`` (``allowed_extra``, models/catalog.py's table) of another JSON type."""
    check_algorithm(algorithm)
    if options is None or not options.strip():
        return {}
    parsed = load_json(options, "options", """an object such as '{"alpha": 1.0, "strategy": "auto"}'""")
    if not isinstance(parsed, dict):
        raise IlargiError(f"""options must be a JSON object such as '{{"alpha": 1.0}}', got {options!r}.""")
    check_known_settings(algorithm, parsed, tuple(allowed_extra))
    for key, setting in allowed_extra.items():
        if key in parsed and not setting.json_accepts(parsed[key]):
            raise IlargiError(
                f"option {key!r} must be {setting.json_expected()} in JSON, got {json.dumps(parsed[key])}."
            )
    check_json_types(algorithm, estimator_class(algorithm), {k: v for k, v in parsed.items() if k not in allowed_extra})
    return parsed


def load_json(text: str, what: str, example: str) -> Any:
    """``text`` parsed strictly (no NaN or Infinity, no duplicate keys, bounded numbers and depth), or an
    error that names ``what`` and shows ``example``."""
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_constant=_no_constant,
            parse_float=_finite_float,
            parse_int=_short_int,
        )
    except json.JSONDecodeError as err:
        raise IlargiError(f"{what} are not valid JSON ({err.msg} at character {err.pos}): pass {example}.") from None
    except RecursionError:
        raise IlargiError(f"{what} are nested too deeply: pass {example}.") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    seen: set[str] = set()
    twice: set[str] = set()
    for key, _ in pairs:
        (twice if key in seen else seen).add(key)
    if twice:
        raise IlargiError(
            f"option(s) {', '.join(map(repr, sorted(twice)))} given twice in the options JSON: keep one of each."
        )
    return dict(pairs)


def _no_constant(name: str) -> float:
    raise IlargiError(f"options are not valid JSON: {name} is not a JSON number. Pass a finite number.")


def _short_int(text: str) -> int:
    if len(text.lstrip("-")) > 18:  # no option takes more; Python refuses to read past 4,300 digits
        raise IlargiError(f"option value {text[:20]}... has {len(text.lstrip('-'))} digits: no option takes that many.")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise IlargiError(f"option value {text} is beyond double precision: pass a finite number.")
    return value


def required(value: Any, what: str) -> str:
    """``value``, an argument that must be a non-empty string (the query, the algorithm...), or an error naming
    ``what``."""
    if not isinstance(value, str) or not value.strip():
        raise IlargiError(f"{what} is missing: pass it as a string.")
    return value


__all__ = ["load_json", "parse_options", "required"]
