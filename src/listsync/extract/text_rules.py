"""Text rules: free text, and the characters no rule takes.

No rule takes text holding a control character other than tab, line feed and carriage return,
or a lone surrogate (docs/assumptions.md A32): :func:`text_problem` says why in words a person
fixing the extract can act on, :func:`text_problems` finds such values in a whole column of
text at once, and :func:`trimmed_text` (what the field rules start from) refuses them. Control
characters that ``str.strip()`` takes for whitespace are trimmed like spaces at either end of a
value. A change to what a rule gives for some input changes
:data:`~listsync.extract.normalize.NORMALIZATION_VERSION`.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from listsync.errors import ListSyncError

__all__ = [
    "NormalizationError",
    "is_missing",
    "normalize_text",
    "surrogate_problem",
    "text_bytes",
    "text_problem",
    "text_problems",
    "trimmed_text",
]


class NormalizationError(ListSyncError, ValueError):
    """A value cannot be normalised; the message says why and what would be accepted."""


# Control characters but tab, line feed and carriage return, and the lone surrogates (text
# decoded from a broken \u escape): no rule takes them (A32).
_BAD_CHARACTER = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_CONTROL_PATTERN = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
_CONTROL_NAMES = (
    *("NUL", "SOH", "STX", "ETX", "EOT", "ENQ", "ACK", "BEL", "BS", "HT", "LF", "VT", "FF", "CR", "SO", "SI"),
    *(
        "DLE",
        "DC1",
        "DC2",
        "DC3",
        "DC4",
        "NAK",
        "SYN",
        "ETB",
        "CAN",
        "EM",
        "SUB",
        "ESC",
        "FS",
        "GS",
        "RS",
        "US",
    ),
)


def text_problem(value: str) -> str | None:
    """Why no rule may take the text ``value`` (see :data:`_BAD_CHARACTER`), or None. Control
    characters that ``str.strip()`` takes for whitespace (vertical tab, form feed...) are
    trimmed like spaces at either end; within the text they are refused too."""
    match = _BAD_CHARACTER.search(value)
    if match is not None:  # it may lie among the whitespace at an end ("a\x1c "): trimmed
        match = _BAD_CHARACTER.search(value.strip())
    if match is None:
        return None
    code = ord(match.group())
    if code >= 0xD800:
        return _lone_surrogate(code)
    name = _CONTROL_NAMES[code] if code < 32 else "DEL"
    return (
        f"value holds the control character U+{code:04X} ({name}): remove it (tab, line feed and "
        "carriage return are the only ones allowed)"
    )


def surrogate_problem(value: str) -> str | None:
    """Why ``value`` cannot be written even as escaped JSON (it holds a lone surrogate), or None.

    Within JSON a control character is data, written escaped; only a lone surrogate is refused.
    """
    surrogate = None if value.isascii() else _SURROGATE.search(value)
    return _lone_surrogate(ord(surrogate.group())) if surrogate is not None else None


def _lone_surrogate(code: int) -> str:
    return (
        f"value holds a lone surrogate U+{code:04X}, which is no character: fix the value where it "
        "was made (often a broken \\u escape in JSON)"
    )


def text_bytes(text: pa.Array) -> np.ndarray:
    """The bytes of the values of ``text`` (Arrow text), as a view: those its offsets span. A
    slice of a longer column, or a take of all of it, shares the longer one's data buffer: looked
    at whole for each slice of 100,000 of 3,000,000 people, it made reading their writes back grow
    with the square of their number."""
    data = text.buffers()[2]
    if data is None or not len(text):
        return np.empty(0, dtype=np.uint8)
    kind = np.int64 if pa.types.is_large_string(text.type) else np.int32
    offsets = np.frombuffer(text.buffers()[1], dtype=kind)
    return np.frombuffer(data, dtype=np.uint8)[offsets[text.offset] : offsets[text.offset + len(text)]]


def text_problems(text: pa.Array, trimmed: pa.Array) -> dict[int, str]:
    """:func:`text_problem` of each position of a text column (``trimmed``: the same, trimmed by
    ``str.strip()``'s measure), found without a Python step per value: the column's bytes are
    looked at at once, and only a column holding some byte below 0x20 or 0x7F (tabs and line
    breaks included) is searched value by value."""
    view = text_bytes(text)
    if not ((view < 0x20).any() or (view == 0x7F).any()):
        return {}
    hits = pc.fill_null(pc.match_substring_regex(trimmed, _CONTROL_PATTERN), False)
    positions = np.flatnonzero(hits.to_numpy(zero_copy_only=False)).tolist()
    return {position: problem for position in positions if (problem := text_problem(text[position].as_py()))}


def is_missing(value: Any) -> bool:
    """True for ``None``, NaN/NaT/NA and text that is empty after trimming."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, (list, dict, tuple)):
        return False
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # array-like values are never "missing" as a whole
        return False


def trimmed_text(value: Any, what: str) -> str:
    """The trimmed text of ``value``, which the field rules start from; numbers from typed sources
    are accepted as their digits.

    :raises NormalizationError: ``value`` is not text, is blank or holds a character no rule takes
        (:func:`text_problem`); the message calls the value ``what``.
    """
    if isinstance(value, str):
        problem = text_problem(value)
        if problem is not None:
            raise NormalizationError(problem)
        text = value.strip()
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    else:
        raise NormalizationError(f"{what} must be text, got {type(value).__name__} {value!r}")
    if not text:
        raise NormalizationError(f"{what} is empty")
    return text


def normalize_text(value: Any) -> str:
    """Free text (names, titles, bios): trimmed; numbers from typed sources become their digits."""
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return str(value)
    return trimmed_text(value, "value")
