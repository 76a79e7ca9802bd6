"""The forms a service keeps values in: which differences between what a sync sent and what the
List shows are the service's own form of the same value, not a change.

A hosted service may keep a value in a form of its own: runs of spaces made one, an e-mail or a
URL in lower case, a URL over https without its trailing slash. A read back that shows a written
value in such a form is no drift: the difference is recorded (``service_forms`` in the summary),
the classes it took are learned per field and kept in the sync's state
(:mod:`listsync.sync.state`), and later runs compare that field in its folded form, so a value
the service rewrote is never written again.

The classes, and the fields they are accepted on:

- ``whitespace`` (every text field): runs of white space are one space, none at either end. No
  reader of a List tells ``VP  Sales`` from ``VP Sales``.
- ``case`` (``email`` and the URL fields only): e-mail addresses and URL hosts are
  case-insensitive, and profile URLs are in practice. A name or a title in another case is a
  change a reader sees, so it stays drift.
- ``url`` (the URL fields): ``http://`` and ``https://`` are one scheme, a trailing slash is
  nothing.

The text cells of a List's rows are learned the same way, per column. A rows List says nothing of
what a column holds, so the value written decides: ``whitespace`` for any text, ``case`` too for
an e-mail address, a domain or a URL, and ``url`` too for a URL (:func:`learn_cell_form`). Numbers
in another notation and enum labels stored as their keys are forms of List cells as well, which the
rows upsert compares by value (:func:`~listsync.sync.rows.cells.cell_values_equal`) and needs no
class for.

Beside the forms, and kept with them, what a service's DELETE of people by phone number or by
first and last name reaches (:data:`DELETE_REACH`, docs/assumptions.md A38): ``one`` person, or
``all`` who share it. The spec does not say; the first delete that could reach more than one
person shows it, and it is learned once, like a form.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from listsync.extract.normalize import lower
from listsync.extract.text_rules import text_bytes

__all__ = [
    "DELETE_REACH",
    "FORM_CLASSES",
    "REACHES",
    "Forms",
    "delete_reach",
    "fold",
    "fold_text",
    "learn_cell_form",
    "learn_form",
    "merged_forms",
]

#: Every class of form, in the order they are applied.
FORM_CLASSES = ("whitespace", "case", "url")

#: Fields of a person on which each class is accepted besides ``whitespace``.
_URL_FIELDS = frozenset({"network_profile_url", "avatar_url"})
_CASE_FIELDS = frozenset({"email"}) | _URL_FIELDS

#: Learned forms: field -> the classes of form the service keeps it in.
Forms = Mapping[str, Sequence[str]]

_SCHEME = re.compile(r"^http://", re.IGNORECASE)
# The white space RE2 (Arrow's regular expressions) knows as \s, so both folds agree.
_SPACES = re.compile(r"\s+", re.ASCII)
# What a text cell holds, by its shape alone: e-mail addresses, domains and URLs are the values
# whose case says nothing (hosts are case-insensitive; the local part in practice).
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_DOMAIN = re.compile(r"(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z]{2,}", re.IGNORECASE)
_URL = re.compile(r"https?://\S+", re.IGNORECASE)


def accepted_classes(field: str) -> tuple[str, ...]:
    """The classes of form accepted for ``field``."""
    if field in _URL_FIELDS:
        return FORM_CLASSES
    if field in _CASE_FIELDS:
        return ("whitespace", "case")
    return ("whitespace",)


def fold(value: str, classes: Iterable[str]) -> str:
    """``value`` in the form the ``classes`` make of it."""
    chosen = set(classes)
    if "whitespace" in chosen:
        value = _SPACES.sub(" ", value).strip()
    if "case" in chosen:
        value = value.lower()
    if "url" in chosen:
        value = _SCHEME.sub("https://", value.strip()).rstrip("/")
    return value


def cell_classes(value: str) -> tuple[str, ...]:
    """The classes of form accepted for a List cell whose text is ``value``: by its shape, as the
    module says."""
    text = value.strip()
    if _URL.fullmatch(text):
        return FORM_CLASSES
    if _EMAIL.fullmatch(text) or _DOMAIN.fullmatch(text):
        return ("whitespace", "case")
    return ("whitespace",)


def learn_form(field: str, sent: Any, shown: Any) -> tuple[str, ...] | None:
    """The fewest classes of form accepted for ``field`` that make ``shown`` of ``sent``; None
    when none do (a different value altogether, or not text)."""
    if not isinstance(sent, str):
        return None
    return _fewest(accepted_classes(field), sent, shown)


def learn_cell_form(sent: Any, shown: Any) -> tuple[str, ...] | None:
    """:func:`learn_form` for a List cell: the classes accepted are those of the text written
    (:func:`cell_classes`)."""
    if not isinstance(sent, str):
        return None
    return _fewest(cell_classes(sent), sent, shown)


def _fewest(classes: tuple[str, ...], sent: str, shown: Any) -> tuple[str, ...] | None:
    if not isinstance(shown, str) or sent == shown:
        return None
    for size in range(1, len(classes) + 1):
        for chosen in combinations(classes, size):
            if fold(sent, chosen) == fold(shown, chosen):
                return chosen
    return None


#: The entry of learned forms that holds how far a DELETE of people by phone or name reaches.
DELETE_REACH = "delete_reach"
#: What :data:`DELETE_REACH` may hold: the first person who has the phone or name, or all of them.
REACHES = ("one", "all")


def delete_reach(forms: Forms) -> str | None:
    """How far the service's deletes by phone or name reach, as learned; None while unknown."""
    learned = list(forms.get(DELETE_REACH, ()))
    return learned[0] if learned else None


def merged_forms(*sources: Forms) -> dict[str, list[str]]:
    """The classes of every source, field by field, in :data:`FORM_CLASSES` order; the
    :data:`DELETE_REACH` of the last source that learned one."""
    merged: dict[str, set[str]] = {}
    reach: list[str] = []
    for forms in sources:
        for field, classes in forms.items():
            if field == DELETE_REACH:
                reach = [name for name in REACHES if name in classes][:1] or reach
            else:
                merged.setdefault(field, set()).update(classes)
    learned = {
        field: [name for name in FORM_CLASSES if name in classes] for field, classes in sorted(merged.items())
    }
    return {**learned, DELETE_REACH: reach} if reach else learned


def fold_text(column: pa.Array | pa.ChunkedArray, classes: Iterable[str]) -> pa.Array | pa.ChunkedArray:
    """A text column in the form the ``classes`` make of it (:func:`fold`, as column operations)."""
    chosen = set(classes)
    if "whitespace" in chosen:
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        if not all(map(_spaces_folded, chunks)):
            column = pc.replace_substring_regex(column, r"\s+", " ")
        column = pc.utf8_trim_whitespace(column)
    if "case" in chosen:
        column = lower(column)
    if "url" in chosen:
        column = pc.replace_substring_regex(pc.utf8_trim_whitespace(column), "(?i)^http://", "https://")
        column = pc.replace_substring_regex(column, "/+$", "")
    return column


def _spaces_folded(text: pa.Array) -> bool:
    """Whether ``text`` has no run of white space to fold: no byte of its values is a tab, a line
    break or a form feed, and no two spaces are side by side. The
    expression that folds the others (RE2's ``\\s``: those bytes, ASCII only, which no byte of a
    longer UTF-8 character is) took half of the time a List person's keys take."""
    if not pa.types.is_string(text.type):
        return False
    codes = text_bytes(text)
    if bool(((codes >= 0x09) & (codes <= 0x0D)).any()):
        return False
    spaces = codes == 0x20
    return not bool((spaces[1:] & spaces[:-1]).any())
