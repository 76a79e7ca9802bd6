"""Value rules: personas, booleans, connection paths, timestamps and JSON values.

These rules read what is not plain text: lists and objects (from JSON text, or from the lists
and dicts of JSON, jsonb and Parquet columns), booleans written in words, timestamps in ISO
8601. JSON is taken as the service takes it: no NaN or infinity (``1e400`` overflows to one),
and nothing nested deeper than :data:`MAX_JSON_DEPTH` levels. A change to what a rule gives for
some input changes :data:`~listsync.extract.normalize.NORMALIZATION_VERSION`.
"""

from __future__ import annotations

import json
import math
import re
from datetime import date, datetime, time, tzinfo
from decimal import Decimal
from typing import Any

import pandas as pd

from listsync.extract.options import resolve_timezone
from listsync.extract.text_rules import NormalizationError, is_missing, surrogate_problem, text_problem

__all__ = [
    "MAX_JSON_DEPTH",
    "normalize_personas",
    "normalize_timestamp",
    "parse_bool",
    "parse_connection_paths",
    "parse_json",
    "to_json_value",
]


# --- personas, booleans, connection paths --------------------------------------------------

_PERSONA_RE = re.compile(r"[a-z0-9_]+")


def normalize_personas(value: Any) -> list[str]:
    """Persona keys as a list: from a list, a JSON array or a comma-separated string.

    Keys are trimmed, lower-cased, inner spaces and hyphens become ``_`` (``"Economic Buyer"``
    → ``"economic_buyer"``), empty items are dropped and repeats removed, order kept. Keys the
    spec does not name are kept (no complete list is published).
    """
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                items: Any = _load_json(text)
            except json.JSONDecodeError as exc:
                raise NormalizationError(
                    f"personas {value!r} look like JSON but do not parse: {exc}"
                ) from exc
        else:
            items = text.split(",")
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        raise NormalizationError(f"personas must be a comma-separated string or a list, got {value!r}")
    if not isinstance(items, list | tuple) or not all(isinstance(item, str) for item in items):
        raise NormalizationError(f"personas {value!r} must be a list of strings")
    keys: list[str] = []
    for item in items:
        key = re.sub(r"[\s-]+", "_", item.strip().lower())
        if not key:
            continue
        if not _PERSONA_RE.fullmatch(key):
            raise NormalizationError(
                f"persona {item!r} may contain only letters, digits, spaces, hyphens and underscores"
            )
        if key not in keys:
            keys.append(key)
    return keys


_TRUE = frozenset({"true", "t", "yes", "y", "1", "on"})
_FALSE = frozenset({"false", "f", "no", "n", "0", "off"})


def parse_bool(value: Any) -> bool:
    """A boolean from a bool, the integers 0/1, or true/false, yes/no, y/n, t/f, 1/0, on/off (any case)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise NormalizationError(f"{value!r} is not a boolean; use true/false, yes/no, y/n, 1/0 or on/off")


def parse_connection_paths(value: Any) -> list[dict[str, Any]]:
    """Connection paths from a JSON array (text, or a list from a JSON/jsonb column).

    Each element must be an object; its string values are trimmed, and ``source`` and
    ``degree`` lower-cased (``"Network"`` → ``"network"``, ``"1ST"`` → ``"1st"``). The fields
    themselves are checked by the client's ``ConnectionPath`` model.
    """
    items: Any = value
    if isinstance(value, str):
        try:
            items = _load_json(value)
        except json.JSONDecodeError as exc:
            raise NormalizationError(f"connection paths are not valid JSON: {exc}") from exc
    if not isinstance(items, list):
        raise NormalizationError(
            f"connection paths must be a JSON array of objects, got {type(items).__name__}"
        )
    paths = []
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise NormalizationError(f"connection path {position} must be an object, got {item!r}")
        path = {key: text.strip() if isinstance(text, str) else text for key, text in item.items()}
        for key in ("source", "degree"):
            if isinstance(path.get(key), str):
                path[key] = path[key].lower()
        paths.append(path)
    return paths


# --- timestamps ----------------------------------------------------------------------------


def normalize_timestamp(value: Any, naive_timezone: str | tzinfo = "UTC") -> datetime:
    """A timezone-aware datetime from a datetime, a date or an ISO 8601 string.

    Values without an offset are taken to be in ``naive_timezone``; a date means midnight there.
    Numbers (epoch seconds or milliseconds are ambiguous) and other formats such as
    ``01/02/2024`` (day or month first?) are rejected.
    """
    zone = resolve_timezone(naive_timezone)
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        parsed = datetime.combine(value, time())
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            raise NormalizationError("timestamp is empty")
        # datetime.fromisoformat accepts "Z" only from Python 3.11.
        iso = text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text
        try:
            parsed = datetime.fromisoformat(iso)
        except ValueError as exc:
            raise NormalizationError(
                f"timestamp {value!r} is not ISO 8601 (e.g. 2024-05-01T10:00:00Z or 2024-05-01)"
            ) from exc
    else:
        raise NormalizationError(
            f"timestamp {value!r} must be an ISO 8601 string or a date/time, not {type(value).__name__}"
        )
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        parsed = parsed.replace(tzinfo=zone)
    return parsed


# --- JSON-safe values ----------------------------------------------------------------------


MAX_JSON_DEPTH = 100
"""The deepest nesting of a JSON value that is sent: deeper ones are rejected (a person's data
is never that deep, and the code that compares and sends values walks them recursively)."""


def to_json_value(value: Any) -> Any:
    """``value`` as something ``json.dumps`` writes faithfully.

    ``None``/NaN/NaT → ``None``; integral Decimals → int, others → float; datetimes and dates
    → ISO 8601 strings; numpy scalars → Python scalars; dicts, lists and tuples recursively;
    bytes → ``NormalizationError``; infinite floats → ``NormalizationError``; nesting deeper
    than :data:`MAX_JSON_DEPTH` or text with a lone surrogate (which no encoding writes) →
    ``NormalizationError``; other objects → ``str(value)``. Text (not within a dict or list)
    holding a control character but tab and line breaks → ``NormalizationError`` (A32).
    """
    if isinstance(value, str):
        problem = text_problem(value)
        if problem is not None:
            raise NormalizationError(problem)
        return value
    return _json_safe(value, 0)


def _json_safe(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        # Within JSON a control character is written escaped; a lone surrogate cannot be.
        problem = surrogate_problem(value)
        if problem is not None:
            raise NormalizationError(problem)
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            raise NormalizationError(f"{value!r} is not a finite number")
        return value
    if isinstance(value, Decimal):
        if not value.is_finite():
            if value.is_nan():
                return None
            raise NormalizationError(f"{value!r} is not a finite number")
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, (dict, list, tuple)) and depth >= MAX_JSON_DEPTH:
        raise NormalizationError(_TOO_DEEP)
    if isinstance(value, dict):
        return {str(key): _json_safe(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item, depth + 1) for item in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise NormalizationError("binary values cannot be sent as JSON")
    if is_missing(value):
        return None
    if hasattr(value, "item"):  # numpy scalar
        return _json_safe(value.item(), depth)
    if hasattr(value, "tolist"):  # numpy array, e.g. a Parquet list read by pandas
        return _json_safe(value.tolist(), depth)
    return str(value)


_TOO_DEEP = f"the value is nested deeper than {MAX_JSON_DEPTH} levels; flatten it"


def parse_json(value: Any) -> Any:
    """A JSON value from JSON text, or a dict/list (JSON, jsonb, Parquet columns) made JSON-safe."""
    if isinstance(value, str):
        problem = text_problem(value)
        if problem is not None:
            raise NormalizationError(problem)
        try:
            return _load_json(value)
        except json.JSONDecodeError as exc:
            raise NormalizationError(f"{value[:40]!r} is not valid JSON: {exc}") from exc
    return to_json_value(value)


def _load_json(text: str) -> Any:
    """``json.loads(text)`` as the service takes JSON: NaN, infinities (``1e400`` overflows to
    one) and nesting deeper than :data:`MAX_JSON_DEPTH` are refused with ``NormalizationError``.

    :raises json.JSONDecodeError: ``text`` is not JSON (each caller words that its own way).
    """
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise NormalizationError(_TOO_DEEP) from None
    except (json.JSONDecodeError, NormalizationError):
        raise
    except ValueError as exc:  # an integer of more digits than Python reads
        raise NormalizationError(f"{text[:40]!r} holds a number too long to read: {exc}") from None
    level = [value]
    for _ in range(MAX_JSON_DEPTH + 1):  # one level more, to see whether it holds anything
        containers = [item for item in level if isinstance(item, (dict, list))]
        if not containers:
            return value
        level = [
            child
            for container in containers
            for child in (container.values() if isinstance(container, dict) else container)
        ]
    raise NormalizationError(_TOO_DEEP)


def _refuse_constant(name: str) -> Any:
    # json.loads reads NaN and Infinity, which JSON cannot carry: a body holding one is invalid.
    raise json.JSONDecodeError(f"{name} is not a JSON value", name, 0)


def _finite_float(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise NormalizationError(f"{text} is not a finite number: JSON has no infinity to send")
    return number
