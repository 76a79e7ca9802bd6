"""Normalisation: what it means, and the runner that applies a rule to a whole column.

Every rule takes one raw value and returns the normalised value, or raises
:class:`~listsync.extract.text_rules.NormalizationError` (a ``ValueError``) whose message says
what is wrong in words a person fixing the extract can act on. The rules live by field family:
:mod:`~listsync.extract.text_rules` (free text, and the characters no rule takes),
:mod:`~listsync.extract.contact_rules` (domains, e-mail addresses, phone numbers, profile URLs)
and :mod:`~listsync.extract.value_rules` (personas, booleans, connection paths, timestamps,
JSON). A missing value (``None`` or blank text) is not the rules' business:
:func:`normalize_column` passes it through as ``None`` and the caller decides whether the field
is required. No rule takes text holding a control character other than tab, line feed and
carriage return, or a lone surrogate (docs/assumptions.md A32): :func:`normalize_column` rejects
such a value for that, whatever the rule, before any fast path.

Rules change what "unchanged" means for a sync (a new rule makes every row look edited), so
they carry a version, :data:`NORMALIZATION_VERSION`, which summaries report. Change the
version whenever a rule's output changes for some input.

:func:`normalize_column` applies a rule to a whole pandas Series and gives exactly what the
scalar rule gives for each value, faster: for domains and e-mail addresses a vectorised fast
path (Arrow compute kernels) decides the common ASCII shapes and leaves the rest to the rule;
every rule's outcomes are remembered per distinct value across the chunks of an extract, and
phone numbers per distinct number whatever their layout; ten-digit North American numbers, and
numbers written in international form that are their own E.164 form, are written without parsing.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, cached_property, partial
from typing import Any

import numpy as np
import pandas as pd
import phonenumbers
import pyarrow as pa
import pyarrow.compute as pc

from listsync.extract.contact_rules import (
    HOST_PATTERN,
    LOCAL_PART_PATTERN,
    MAX_DOMAIN_LENGTH,
    MAX_EMAIL_LENGTH,
    MAX_LOCAL_PART_LENGTH,
    check_region,
    normalize_domain,
    normalize_email,
    normalize_phone,
    normalize_profile_url,
)
from listsync.extract.csv_reader import ARROW_TEXT
from listsync.extract.text_rules import (
    NormalizationError,
    is_missing,
    normalize_text,
    text_bytes,
    text_problem,
    text_problems,
)
from listsync.extract.value_rules import normalize_personas, parse_connection_paths, parse_json

NORMALIZATION_VERSION = "1"

__all__ = [
    "NORMALIZATION_VERSION",
    "PYTHON_WHITESPACE",
    "ColumnResult",
    "lower",
    "normalize_column",
]


@dataclass
class ColumnResult:
    """One column after a rule: the normalised value of each position (``None`` when missing or
    rejected), and ``errors``, the reason each rejected position was rejected.

    ``data`` holds the values: a list, or, for a rule that gives text run over a column of text,
    an Arrow string array (:attr:`text`), which a caller building columns takes as it is;
    :attr:`values` makes Python values of it when asked, :meth:`value` one position at a time.
    """

    data: list[Any] | pa.Array
    errors: dict[int, str] = field(default_factory=dict)

    @property
    def text(self) -> pa.Array | None:
        """The values as an Arrow string array, when the rule gave them so; else None."""
        return self.data if isinstance(self.data, pa.Array) else None

    @cached_property
    def values(self) -> list[Any]:
        """The values as a list of Python values."""
        return self.data.to_pylist() if isinstance(self.data, pa.Array) else self.data

    def value(self, position: int) -> Any:
        """The value at ``position``, without making Python values of the others."""
        return self.data[position].as_py() if isinstance(self.data, pa.Array) else self.data[position]

    def in_python(self) -> ColumnResult:
        """The same result with its values as a list, made at once: for reading every position."""
        return self if isinstance(self.data, list) else ColumnResult(self.values, self.errors)


def lower(text: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Arrow text lower-cased as ``pc.utf8_lower`` does it: by ASCII's rule, the same result twenty
    times sooner, when every byte is ASCII."""
    chunks = text.chunks if isinstance(text, pa.ChunkedArray) else [text]
    return pc.ascii_lower(text) if all(map(_all_ascii, chunks)) else pc.utf8_lower(text)


def _all_ascii(text: pa.Array) -> bool:
    if not pa.types.is_string(text.type):
        return False
    return int(text_bytes(text).max(initial=0)) < 0x80


# The fast paths decide ASCII values only (their other outputs are dropped): ASCII's case rule and
# lengths in bytes are theirs.
def _fast_domains(text: pa.Array) -> pa.Array:
    """Vectorised :func:`normalize_domain` for plain ASCII values; null where it cannot decide."""
    low = pc.ascii_lower(pc.utf8_trim_whitespace(text))
    short = pc.less_equal(pc.binary_length(low), MAX_DOMAIN_LENGTH)
    bare = pc.and_(pc.match_substring_regex(low, f"^{HOST_PATTERN}$"), pc.invert(pc.starts_with(low, "www.")))
    bare = pc.fill_null(pc.and_(bare, short), False)
    # Most values are a bare host already; only the others pay for the clean-up.
    others = pc.filter(low, pc.invert(bare))
    for pattern in (r"^[a-z][a-z0-9+.-]*://", r"[/?#].*$", r":[0-9]*$", r"\.+$", r"^(?:www\.)+"):
        others = pc.replace_substring_regex(others, pattern, "")
    # Anything with user info, odd characters or an unusual shape goes to the scalar rule.
    cleaned_ok = pc.and_(
        pc.match_substring_regex(others, f"^{HOST_PATTERN}$"),
        pc.less_equal(pc.binary_length(others), MAX_DOMAIN_LENGTH),
    )
    cleaned = pc.if_else(pc.and_(cleaned_ok, pc.invert(pc.match_substring(others, "@"))), others, None)
    return pc.replace_with_mask(low, pc.invert(bare), cleaned)


def _fast_emails(text: pa.Array) -> pa.Array:
    """Vectorised :func:`normalize_email` for plain ASCII addresses; null where it cannot decide."""
    address = pc.ascii_lower(pc.utf8_trim_whitespace(text))
    decided = pc.and_(
        pc.match_substring_regex(address, f"^{LOCAL_PART_PATTERN}@{HOST_PATTERN}$"),
        pc.and_(
            pc.less_equal(pc.find_substring(address, "@"), MAX_LOCAL_PART_LENGTH),
            pc.less_equal(pc.binary_length(address), MAX_EMAIL_LENGTH),
        ),
    )
    return pc.if_else(decided, address, None)


_MAX_PHONE_INPUT = 250  # phonenumbers refuses longer inputs as too long


def _phone_keys(text: pa.Array) -> pa.Array:
    """Numbers written with digits and layout characters only, as ``+`` and digits; null otherwise.

    phonenumbers ignores spaces, dots, hyphens and brackets in a number of at least three
    digits and at most 250 characters (shorter or longer inputs it treats by their layout), so
    one number in several layouts (``(415) 555-2671``, ``415.555.2671``) gets one key and is
    parsed once.
    """
    plain = pc.and_(
        pc.match_substring_regex(text, r"^\s*(?:\+\s*)?(?:[\s().-]*[0-9]){3,}[\s().-]*$"),
        pc.less_equal(pc.utf8_length(text), _MAX_PHONE_INPUT),
    )
    return pc.if_else(plain, pc.replace_substring_regex(text, r"[^0-9+]", ""), None)


def _nanp_shortcut_holds() -> bool:
    """Whether phonenumbers' metadata still has what :func:`_fast_phones` relies on."""
    us = phonenumbers.PhoneMetadata.metadata_for_region("US")
    general = us.general_desc if us is not None else None
    return (
        us is not None
        and general is not None
        and us.country_code == 1
        and phonenumbers.region_code_for_country_code(1) == "US"
        and us.international_prefix == "011"
        and us.national_prefix_for_parsing == "1"
        and 10 in general.possible_length
        and 10 not in general.possible_length_local_only
    )


_NANP_SHORTCUT = _nanp_shortcut_holds()


def _fast_phones(keys: pa.Array, region: str) -> pa.Array:
    """:func:`normalize_phone` of phone keys that are ten-digit North American numbers, or numbers in
    international form that are their own E.164 form (:func:`_fast_international`); null for others.

    ``normalize_phone`` would give ``+1`` and the ten digits for a key ``+1NXXXXXXXXX`` (any
    default region) or, with default region US, ``NXXXXXXXXX``, where N is 2 to 9. Following
    ``phonenumbers.parse``: the ``+`` and the known country code 1 are taken off (without a
    ``+``, nothing is: N is neither the start of the US international prefix 011 nor of the
    country code 1), the number's metadata is the US one either way, the national prefix 1 does
    not match N, so the national number is the ten digits; no extension (digits only), no
    leading zero. ``is_possible_number`` accepts ten digits for +1, the E.164 form is ``+1``
    and the digits, and it reads back as itself (its national part does not start with the
    national prefix 1). ``_NANP_SHORTCUT`` checks that the metadata still says so; the tests
    compare this function with the rule.
    """
    north_american = pc.match_substring_regex(keys, r"^\+1[2-9][0-9]{9}$")
    decided = pc.if_else(north_american, keys, _fast_international(keys))
    if region == "US":
        national = pc.match_substring_regex(keys, r"^[2-9][0-9]{9}$")
        decided = pc.if_else(national, pc.binary_join_element_wise("+1", keys, ""), decided)
    return decided


def _fast_international(keys: pa.Array) -> pa.Array:
    """:func:`normalize_phone` of phone keys written in international form (``+``, a country code,
    the national digits) that are their own E.164 form; null for the others (left to the rule).

    A key is decided when its national digits are of a class :func:`_own_e164` vouches for: of
    their country code, their length and their first digit. Country codes are prefix-free, so a
    key has at most one of them."""
    digits = pc.utf8_slice_codeunits(keys, 1)
    decided = pa.nulls(len(keys), pa.string())
    international = pc.fill_null(pc.match_substring_regex(keys, r"^\+[1-9][0-9]{2,19}$"), False)
    for width in (1, 2, 3):
        code = pc.utf8_slice_codeunits(digits, 0, width)
        national = pc.utf8_slice_codeunits(digits, width)
        classes = pc.binary_join_element_wise(
            code, pc.cast(pc.utf8_length(national), pa.string()), pc.utf8_slice_codeunits(national, 0, 1), ":"
        )
        present = pc.filter(classes, international).unique().to_pylist()
        vouched = [shape for shape in present if _own_e164(*shape.split(":"))]
        if vouched:
            own = pc.and_(international, pc.is_in(classes, pa.array(vouched, pa.string())))
            decided = pc.if_else(own, keys, decided)
    return decided


@cache
def _own_e164(code: str, length: str, first: str) -> bool:
    """Whether every key ``+<code><national>`` with ``length`` national digits starting with
    ``first`` is its own :func:`normalize_phone`.

    ``phonenumbers.parse`` takes off the ``+`` and the country code, then a national prefix the
    country's ``national_prefix_for_parsing`` matches at the start; :func:`normalize_phone` also
    reads the E.164 form back with that pattern. Where the pattern is a list of digit strings
    (``0``, ``0|180020``) none of which starts with ``first`` (1-9, so no leading zero to keep),
    nothing is taken off, and the outcome depends on the number of national digits alone
    (``is_possible_number``): so one number of the class, asked of the rule, answers for all."""
    if not code.isdigit() or code.startswith("0") or not first.isdigit() or first == "0":
        return False
    region = phonenumbers.region_code_for_country_code(int(code))
    metadata = phonenumbers.PhoneMetadata.metadata_for_region_or_calling_code(int(code), region)
    if metadata is None or metadata.national_prefix_transform_rule:
        return False
    pattern = metadata.national_prefix_for_parsing or ""
    prefixes = pattern.split("|") if pattern else []
    if not all(prefix.isdigit() and not prefix.startswith(first) for prefix in prefixes):
        return False
    sample = f"+{code}{first}{'5' * (int(length) - 1)}"
    try:
        return normalize_phone(sample) == sample
    except NormalizationError:
        return False


def _phone_region(rule: Callable[..., Any]) -> str | None:
    """The default region a ``normalize_phone`` rule (or a partial of it) reads numbers with.

    None when the rule's arguments do not bind or name no region phonenumbers knows: the rule
    itself then raises on every value, and the column must do the same.
    """
    args, keywords = (rule.args, rule.keywords) if isinstance(rule, partial) else ((), {})
    try:
        bound = inspect.signature(normalize_phone).bind("", *args, **keywords)
        return check_region(bound.arguments.get("default_region", "US"))
    except (TypeError, ValueError, AttributeError):
        return None


PYTHON_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""The characters ``str.isspace()`` accepts, i.e. what ``str.strip()`` removes."""

# Vectorised shortcuts per rule, for columns of text: a fast path decides the common shapes
# outright (NA where it cannot); a cache key makes values that must normalise alike share one
# call of the rule.
_FAST_PATHS: dict[Callable[..., Any], Callable[[pa.Array], pa.Array]] = {
    normalize_domain: _fast_domains,
    normalize_email: _fast_emails,
}
_CACHE_KEYS: dict[Callable[..., Any], Callable[[pa.Array], pa.Array]] = {normalize_phone: _phone_keys}
# Rules that give text: over a column of text, their values stay Arrow strings.
_TEXT_RULES = frozenset(
    {normalize_domain, normalize_email, normalize_phone, normalize_profile_url, normalize_text}
)
# Rules that turn text into lists or dicts: cached outputs are shared, so each row gets a copy.
_CONTAINER_RULES = frozenset({normalize_personas, parse_connection_paths, parse_json})
# Rules whose columns repeat values (account domains, switchboard numbers): each distinct value of
# a column is normalised once (half of a chunk of CRM-like people's websites or phones is repeats).
_REPEATING_RULES = frozenset({normalize_domain, normalize_phone})
# A shorter column goes through as it is: encoding it costs about 0.25 ms a call, which its repeats
# repay from about a thousand values on.
_DISTINCT_FROM = 1_000


def normalize_column(series: pd.Series, rule: Callable[[Any], Any]) -> ColumnResult:
    """Apply ``rule`` to every value of ``series`` (by position), missing values giving ``None``.

    Use ``functools.partial`` for rules with options, e.g.
    ``normalize_column(s, partial(normalize_phone, default_region="GB"))``, and reuse one rule
    object for all the chunks of an extract. The result is the same as calling the rule on
    each value: domains and e-mails take a vectorised fast path, free text is trimmed as a
    column, and outcomes are cached per rule and distinct value across calls (phone numbers per
    distinct number, whatever their layout), since extracts repeat values (account domains,
    switchboard numbers); a column of a thousand domains or phones or more goes through the fast
    paths one distinct value at a time too. Text holding a control character (tab and line breaks
    aside) or a lone surrogate is rejected for it, with the reason the text rules give, whatever
    the rule (A32).
    A rule that gives text, over a column of text, gives its values as Arrow strings
    (:attr:`ColumnResult.text`).
    """
    if series.dtype == ARROW_TEXT:  # a CSV chunk as Arrow's parser read it
        text = pa.array(series.array)
        text = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
        return _normalize_text(text, rule) if len(text) else ColumnResult([])
    raw = series.tolist()
    if not raw:
        return ColumnResult([])
    if pd.api.types.infer_dtype(series, skipna=True) == "string":
        try:
            text = pa.array(raw, type=pa.string())
        except UnicodeEncodeError:  # a lone surrogate, which Arrow's UTF-8 cannot hold
            pass
        else:
            return _normalize_text(text, rule, raw)
    return _apply(rule, raw)


def _normalize_text(text: pa.Array, rule: Callable[[Any], Any], raw: list[Any] | None = None) -> ColumnResult:
    """:func:`_normalize_text_column`, over the distinct values of ``text`` for a rule whose
    columns repeat values (:data:`_REPEATING_RULES`), spread back to every position holding each
    (a column of :data:`_DISTINCT_FROM` values or more)."""
    function = rule.func if isinstance(rule, partial) else rule
    if function not in _REPEATING_RULES or len(text) < _DISTINCT_FROM or text.null_count == len(text):
        return _normalize_text_column(text, rule, raw)
    encoded = pc.dictionary_encode(text)
    once = _normalize_text_column(encoded.dictionary, rule)
    codes = pc.fill_null(encoded.indices, -1).to_numpy()
    failed = np.flatnonzero(np.isin(codes, list(once.errors))).tolist()
    errors = {position: once.errors[int(codes[position])] for position in failed}
    assert isinstance(once.data, pa.Array)  # a text rule over text gives Arrow strings
    return ColumnResult(once.data.take(encoded.indices), errors)


def _normalize_text_column(
    text: pa.Array, rule: Callable[[Any], Any], raw: list[Any] | None = None
) -> ColumnResult:
    """:func:`normalize_column` for a column of text (what every CSV gives), without a Python
    step per row beyond the missing-value test: the fast path decides what it can, then the
    rule runs once per distinct key and the outcomes are spread back by position. ``raw``: the
    values as Python values, when they are; else those the rule needs are made from ``text``."""

    @cache
    def objects() -> np.ndarray:
        return np.asarray(raw, dtype=object)

    def values_at(positions: np.ndarray) -> np.ndarray:
        if raw is None:
            return text.take(pa.array(positions)).to_numpy(zero_copy_only=False)
        return objects()[positions]

    function = rule.func if isinstance(rule, partial) else rule
    errors: dict[int, str] = {}
    # Present: not null, and not blank by str.strip()'s measure (hence its whitespace set).
    trimmed = pc.utf8_trim(text, characters=PYTHON_WHITESPACE)
    pending = pc.fill_null(pc.greater(pc.binary_length(trimmed), 0), False).to_numpy(zero_copy_only=False)
    for position, problem in text_problems(text, trimmed).items():
        if pending[position]:
            errors[position] = problem
            pending[position] = False
    make_keys = _CACHE_KEYS.get(function)
    keys = make_keys(text) if make_keys is not None else None
    fast = _FAST_PATHS.get(function)
    decided = pa.nulls(len(text), pa.string())
    if function is normalize_text:
        # Free text is its trimmed self: blanks and control characters were taken out above.
        decided = trimmed
    elif fast is not None:
        # Only ASCII values: beyond it Arrow's and Python's case mapping differ ("İ").
        decided = pc.if_else(pc.fill_null(pc.string_is_ascii(text), False), fast(text), None)
    elif function is normalize_phone and keys is not None and _NANP_SHORTCUT:
        region = _phone_region(rule)
        if region is not None:
            decided = _fast_phones(keys, region)
    done = pending & pc.is_valid(decided).to_numpy(zero_copy_only=False)
    pending &= ~done
    positions = np.flatnonzero(pending)
    outputs = np.empty(0, dtype=object)
    if positions.size:
        inputs = values_at(positions)
        if keys is not None:
            known = keys.take(pa.array(positions))
            has_key = pc.is_valid(known).to_numpy(zero_copy_only=False)
            inputs[has_key] = known.filter(has_key).to_numpy(zero_copy_only=False)
        codes, distinct = pd.factorize(inputs)
        # Inputs already in a rule's output form ("+14155552671") go last: by then most were
        # produced from another layout of the same value and are found in the memo.
        outcomes: list[tuple[bool, Any]] = [(False, "")] * len(distinct)
        for index in sorted(range(len(distinct)), key=lambda index: str(distinct[index]).startswith("+")):
            outcomes[index] = _cached_outcome(rule, distinct[index])
        passed = np.fromiter((ok for ok, _ in outcomes), bool, len(outcomes))
        by_code = np.empty(len(outcomes), dtype=object)
        by_code[:] = [output for _, output in outcomes]
        good = passed[codes]
        failed = positions[~good]
        for position, value in zip(failed.tolist(), values_at(failed).tolist(), strict=True):
            # A failure's reason quotes the input, so it is computed from the value as written.
            errors[position] = _cached_outcome(rule, value)[1]
        positions, outputs = positions[good], by_code[codes[good]]
    if function in _TEXT_RULES:
        # Arrow strings throughout: the decided values kept, the rule's outputs put in place.
        column = pc.if_else(pa.array(done), decided, pa.scalar(None, pa.string()))
        if positions.size:
            chosen = np.zeros(len(text), dtype=bool)
            chosen[positions] = True
            column = pc.replace_with_mask(column, pa.array(chosen), pa.array(outputs, pa.string()))
        return ColumnResult(column, errors)
    values = np.full(len(text), None, dtype=object)
    # Python values are made for the decided values only.
    values[done] = decided.filter(pa.array(done)).to_numpy(zero_copy_only=False)
    values[positions] = outputs
    if function in _CONTAINER_RULES:
        return ColumnResult([copy.deepcopy(value) if value is not None else None for value in values], errors)
    return ColumnResult(values.tolist(), errors)


def _apply(rule: Callable[[Any], Any], raw: list[Any]) -> ColumnResult:
    """:func:`normalize_column` for typed values (SQL, Parquet, JSON): the rule on each position."""
    values: list[Any] = [None] * len(raw)
    errors: dict[int, str] = {}
    for position, value in enumerate(raw):
        if is_missing(value):
            continue
        problem = text_problem(value) if isinstance(value, str) else None
        if problem is not None:
            errors[position] = problem
            continue
        try:
            ok, output = _cached_outcome(rule, value)
        except TypeError:  # unhashable: lists and dicts from JSON columns
            ok, output = _outcome(rule, value)
        if not ok:
            errors[position] = output
        else:
            # Cached lists and dicts are shared; each row gets its own copy to change freely.
            values[position] = copy.deepcopy(output) if isinstance(output, (list, dict)) else output
    return ColumnResult(values, errors)


def _outcome(rule: Callable[[Any], Any], value: Any) -> tuple[bool, Any]:
    try:
        return True, rule(value)
    except NormalizationError as exc:
        return False, str(exc)


# Rules for which rule(rule(x)) == rule(x): an output they produced is known to pass unchanged,
# so "+14155552671" is not parsed again once "(415) 555-2671" has given it.
_IDEMPOTENT = frozenset({normalize_domain, normalize_email, normalize_phone, normalize_text})
_CACHE_LIMIT = 200_000
_outcomes: dict[tuple[Any, type, Any], tuple[bool, Any]] = {}


def _cached_outcome(rule: Callable[[Any], Any], value: Any) -> tuple[bool, Any]:
    """``_outcome(rule, value)``, remembered per rule object and typed value.

    The type is part of the key because 1, 1.0 and True are equal as dict keys but not to every
    rule. Memory is bounded by emptying the memo when it is full: simpler than an eviction
    order, and an extract's repeated values are back in it within a chunk. Raises
    ``TypeError`` for unhashable values.
    """
    key = (rule, type(value), value)
    outcome = _outcomes.get(key)
    if outcome is None:
        outcome = _outcome(rule, value)
        if len(_outcomes) >= _CACHE_LIMIT:
            _outcomes.clear()
        _outcomes[key] = outcome
        ok, output = outcome
        function = rule.func if isinstance(rule, partial) else rule
        if ok and function in _IDEMPOTENT:
            _outcomes[(rule, type(output), output)] = outcome
    return outcome
