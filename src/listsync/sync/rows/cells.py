"""Cell values: an extract value as the List stores it, and equality as the List means it, a pair
of values or two columns at a time."""

from __future__ import annotations

import datetime as dt
import itertools
import math
import numbers
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import numpy as np

_AS_THEY_ARE = frozenset((str, bool, int, type(None)))


def to_cell_value(value: Any) -> Any:
    """Convert an extract value to the JSON value sent in a cell.

    ``Decimal`` and other numbers become ``int`` when integral (``Decimal("10.00")`` → ``10``),
    else ``float``; dates become ``YYYY-MM-DD``; timestamps become ISO 8601 in UTC with a ``Z``
    (naive ones are taken as UTC); mappings and sequences are converted element by element.

    :raises ValueError: a number that JSON cannot carry (NaN, infinity).
    :raises TypeError: a value of a type that has no JSON form.
    """
    kind = type(value)
    # JSON's own types first, by exact type: abstract-class checks cost more than the rest.
    if kind in _AS_THEY_ARE:
        return value
    if kind is float and math.isfinite(value):
        return value
    if kind is dict:
        return {str(k): to_cell_value(v) for k, v in value.items()}
    if kind is list:
        return [to_cell_value(v) for v in value]
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Number):
        return _json_number(value)
    if isinstance(value, dt.datetime):
        return _as_utc(value).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): to_cell_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_cell_value(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars (bool_, int64, float64) unwrap to Python ones
        return to_cell_value(value.item())
    raise TypeError(f"a {type(value).__name__} value has no JSON form")


def _json_number(value: Any) -> int | float:
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} is not a finite number")
        return int(value) if value == value.to_integral_value() else float(value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{number} is not a finite number")
    return number


_SAME_TYPE_SCALARS = frozenset((str, int, float, bool))


def cell_values_equal(desired: Any, current: Any) -> bool:
    """Whether the List already holds ``desired`` (an extract value) in a cell whose value is ``current``.

    ``current`` is the cell's JSON ``value`` as read (``None`` for an empty or absent cell).
    Numbers compare by the value that would be sent (``10 == 10.0``, ``Decimal("1.50") == 1.5``);
    strings exactly; booleans only to booleans; a ``date`` to a ``YYYY-MM-DD`` string, a
    ``datetime`` to any ISO 8601 string of the same instant; mappings and sequences element by
    element, key order ignored.
    """
    # Fast path for the common case, a scalar read back as the type it was sent as: for these
    # types Python's equality is exactly the rules below (JSON holds no NaN).
    if type(desired) is type(current) and type(desired) in _SAME_TYPE_SCALARS:
        return bool(desired == current)
    if desired is None or current is None:
        return desired is None and current is None
    if isinstance(desired, dt.datetime):
        return isinstance(current, str) and _parse_instant(current) == _as_utc(desired)
    if isinstance(desired, dt.date):
        return isinstance(current, str) and current == desired.isoformat()
    if isinstance(desired, bool) or isinstance(current, bool):
        return isinstance(desired, bool) and isinstance(current, bool) and desired == current
    if isinstance(desired, numbers.Number):
        return isinstance(current, numbers.Number) and _json_number(desired) == current
    if isinstance(desired, str):
        return isinstance(current, str) and desired == current
    if isinstance(desired, Mapping):
        return (
            isinstance(current, Mapping)
            and {str(k) for k in desired} == set(current)
            and all(cell_values_equal(v, current[str(k)]) for k, v in desired.items())
        )
    if isinstance(desired, (list, tuple)):
        return (
            isinstance(current, Sequence)
            and not isinstance(current, str)
            and len(desired) == len(current)
            and all(cell_values_equal(d, c) for d, c in zip(desired, current, strict=True))
        )
    if hasattr(desired, "item"):
        return cell_values_equal(desired.item(), current)
    raise TypeError(f"a {type(desired).__name__} value has no JSON form")


# Kinds of value compared by Python's equality alone, once kinds match: None, booleans, numbers
# (10 == 10.0) and text. Booleans are not numbers here (JSON: true is not 1).
NONE_KIND = 0
NUMBER_KIND = 2
TEXT_KIND = 3
_SIMPLE_KINDS = {type(None): NONE_KIND, bool: 1, int: NUMBER_KIND, float: NUMBER_KIND, str: TEXT_KIND}
#: Any other value: compared by :func:`cell_values_equal`.
OTHER_KIND = 4


def value_kinds(values: np.ndarray) -> np.ndarray:
    """The kind of each of ``values`` (an object array): one of the ``*_KIND`` numbers."""
    kinds = map(_SIMPLE_KINDS.get, map(type, values), itertools.repeat(OTHER_KIND))
    return np.fromiter(kinds, dtype=np.int8, count=len(values))


def cells_equal(
    desired: np.ndarray, current: np.ndarray, desired_kinds: np.ndarray | None = None
) -> np.ndarray:
    """:func:`cell_values_equal` of each pair, over two object arrays of one length (the kinds of
    ``desired``, when known, given as ``desired_kinds``).

    Pairs of simple values (None, booleans, numbers, text) compare at once: same kind and
    Python-equal. Other pairs (objects, arrays, dates, decimals...) that Python finds equal and
    that print alike are equal; the rest are compared one by one by :func:`cell_values_equal`.
    """
    desired_kinds = value_kinds(desired) if desired_kinds is None else desired_kinds
    current_kinds = value_kinds(current)
    equal = (desired_kinds == current_kinds) & np.asarray(desired == current, dtype=bool)
    other = np.flatnonzero((desired_kinds == OTHER_KIND) | (current_kinds == OTHER_KIND))
    if other.size:
        wanted, have = desired[other], current[other]
        same = equal[other] & np.asarray(_reprs(wanted) == _reprs(have), dtype=bool)
        for index in np.flatnonzero(~same).tolist():
            same[index] = cell_values_equal(wanted[index], have[index])
        equal[other] = same
    return equal


_reprs = np.frompyfunc(repr, 1, 1)


def _as_utc(value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc)


def _parse_instant(text: str) -> dt.datetime | None:
    # fromisoformat before Python 3.11 does not read a trailing "Z".
    candidate = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        parsed = dt.datetime.fromisoformat(candidate)
    except ValueError:
        return None
    return _as_utc(parsed)
