"""Normalisation rules: one function per rule, and a column-at-a-time runner.

Every rule takes one raw value and returns the normalised value, or raises
:class:`NormalizationError` (a ``ValueError``) whose message says what is wrong in words a
person fixing the extract can act on. A missing value (``None`` or blank text) is not the
rules' business: :func:`normalize_column` passes it through as ``None`` and the caller decides
whether the field is required. No rule takes text holding a control character other than tab,
line feed and carriage return, or a lone surrogate (docs/assumptions.md A32):
:func:`normalize_column` rejects such a value for that, whatever the rule, before any fast path.

JSON is taken as the service takes it: no NaN or infinity (``1e400`` overflows to one), and
nothing nested deeper than :data:`MAX_JSON_DEPTH` levels.

Rules change what "unchanged" means for a sync (a new rule makes every row look edited), so
they carry a version, :data:`NORMALIZATION_VERSION`, which summaries report. Change the
version whenever a rule's output changes for some input.

:func:`normalize_column` applies a rule to a whole pandas Series and gives exactly what the
scalar rule gives for each value, faster: for domains and e-mail addresses a vectorised fast
path (Arrow compute kernels) decides the common ASCII shapes and leaves the rest to the rule;
every rule's outcomes are remembered per distinct value across the chunks of an extract, and
phone numbers per distinct number whatever their layout; ten-digit North American numbers,
whose E.164 form phonenumbers would give without surprise, are written without parsing.
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, time, tzinfo
from decimal import Decimal
from functools import lru_cache, partial
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import idna
import numpy as np
import pandas as pd
import phonenumbers
import pyarrow as pa
import pyarrow.compute as pc

from listsync.errors import ListSyncError
from listsync.extract.options import resolve_timezone

NORMALIZATION_VERSION = "1"

__all__ = [
    "MAX_JSON_DEPTH",
    "NORMALIZATION_VERSION",
    "PYTHON_WHITESPACE",
    "ColumnResult",
    "NormalizationError",
    "check_region",
    "is_missing",
    "normalize_column",
    "normalize_domain",
    "normalize_email",
    "normalize_personas",
    "normalize_phone",
    "normalize_profile_url",
    "normalize_text",
    "normalize_timestamp",
    "parse_bool",
    "parse_connection_paths",
    "parse_json",
    "resolve_timezone",
    "text_problems",
    "to_json_value",
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


def _text_problem(value: str) -> str | None:
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


def _lone_surrogate(code: int) -> str:
    return (
        f"value holds a lone surrogate U+{code:04X}, which is no character: fix the value where it "
        "was made (often a broken \\u escape in JSON)"
    )


def text_problems(text: pa.Array, trimmed: pa.Array, raw: list[Any]) -> dict[int, str]:
    """:func:`_text_problem` of each position of a text column (``trimmed``: the same, trimmed by
    ``str.strip()``'s measure), found without a Python step per value: the column's bytes are
    looked at at once, and only a column holding some byte below 0x20 or 0x7F (tabs and line
    breaks included) is searched value by value."""
    data = text.buffers()[2]
    if data is None:
        return {}
    view = np.frombuffer(data, dtype=np.uint8)
    if not ((view < 0x20).any() or (view == 0x7F).any()):
        return {}
    hits = pc.fill_null(pc.match_substring_regex(trimmed, _CONTROL_PATTERN), False)
    positions = np.flatnonzero(hits.to_numpy(zero_copy_only=False)).tolist()
    return {position: problem for position in positions if (problem := _text_problem(raw[position]))}


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


def _text(value: Any, what: str) -> str:
    """The trimmed text of ``value``; numbers from typed sources are accepted as their digits."""
    if isinstance(value, str):
        problem = _text_problem(value)
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
    return _text(value, "value")


# --- domains -------------------------------------------------------------------------------

# One LDH label: letters, digits and inner hyphens, at most 63 characters.
_LABEL = r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)"
# A host of at least two labels whose last label (the TLD) starts with a letter, as every TLD
# does (so an IP address is not a host).
_HOST = rf"(?:{_LABEL}\.)+[a-z](?:[a-z0-9-]{{0,61}}[a-z0-9])?"
_HOST_RE = re.compile(_HOST)
_SCHEME_RE = re.compile(r"^[a-z][a-z0-9+.-]*://")
_MAX_DOMAIN_LENGTH = 253


@lru_cache(maxsize=4096)
def _punycode(host: str) -> str:
    """``host`` in ASCII (IDNA 2008 with UTS 46 mapping); ``idna.IDNAError`` if it cannot be.

    Remembered because an extract repeats its few international domains in every address and
    URL on them, and idna is pure Python (errors are not remembered: they are rare).
    """
    return str(idna.encode(host, uts46=True).decode("ascii"))


def _check_host(host: str, original: str) -> str:
    if len(host) > _MAX_DOMAIN_LENGTH:
        raise NormalizationError(f"domain {original!r} is longer than {_MAX_DOMAIN_LENGTH} characters")
    if re.fullmatch(r"[0-9.]+", host) or host.startswith("["):
        raise NormalizationError(f"domain {original!r} is an IP address, not a domain name")
    if "." not in host:
        raise NormalizationError(f"domain {original!r} has no dot; expected a name such as example.com")
    if not _HOST_RE.fullmatch(host):
        raise NormalizationError(
            f"domain {original!r} is not a valid host name (letters, digits, hyphens and dots; "
            "labels of 1 to 63 characters, not starting or ending with a hyphen)"
        )
    return host


def normalize_domain(value: Any) -> str:
    """An account domain as a bare, lower-case host in ASCII (punycode for international names).

    Drops a scheme, user info, leading ``www.``, a port, a path, query or fragment and trailing dots:
    ``" HTTPS://www.Example.COM:443/about "`` → ``"example.com"``, ``"bücher.de"`` →
    ``"xn--bcher-kva.de"``. Rejects IP addresses, single labels and e-mail addresses.
    """
    original = _text(value, "domain")
    text = original.lower()
    had_scheme = bool(_SCHEME_RE.match(text))
    text = _SCHEME_RE.sub("", text)
    text = text.removeprefix("//")
    text = re.split(r"[/?#]", text, maxsplit=1)[0]
    if "@" in text:
        if not had_scheme:
            raise NormalizationError(
                f"domain {original!r} looks like an e-mail address; map the domain, not the address"
            )
        text = text.rsplit("@", 1)[1]
    if re.search(r":\d*$", text):
        text = text.rsplit(":", 1)[0]
    # Every leading "www." goes, so that a normalised domain normalises to itself.
    text = re.sub(r"^(?:www\.)+", "", text.rstrip("."))
    if not text:
        raise NormalizationError(f"domain {original!r} has no host name")
    if any(char.isspace() for char in text):
        raise NormalizationError(f"domain {original!r} contains spaces")
    if not text.isascii():
        try:
            text = _punycode(text)
        except idna.IDNAError as exc:
            raise NormalizationError(f"domain {original!r} is not a valid international name: {exc}") from exc
    return _check_host(text, original)


def _fast_domains(text: pa.Array) -> pa.Array:
    """Vectorised :func:`normalize_domain` for plain ASCII values; null where it cannot decide."""
    low = pc.utf8_lower(pc.utf8_trim_whitespace(text))
    short = pc.less_equal(pc.utf8_length(low), _MAX_DOMAIN_LENGTH)
    bare = pc.and_(pc.match_substring_regex(low, f"^{_HOST}$"), pc.invert(pc.starts_with(low, "www.")))
    bare = pc.fill_null(pc.and_(bare, short), False)
    # Most values are a bare host already; only the others pay for the clean-up.
    others = pc.filter(low, pc.invert(bare))
    for pattern in (r"^[a-z][a-z0-9+.-]*://", r"[/?#].*$", r":[0-9]*$", r"\.+$", r"^(?:www\.)+"):
        others = pc.replace_substring_regex(others, pattern, "")
    # Anything with user info, odd characters or an unusual shape goes to the scalar rule.
    cleaned_ok = pc.and_(
        pc.match_substring_regex(others, f"^{_HOST}$"),
        pc.less_equal(pc.utf8_length(others), _MAX_DOMAIN_LENGTH),
    )
    cleaned = pc.if_else(pc.and_(cleaned_ok, pc.invert(pc.match_substring(others, "@"))), others, None)
    return pc.replace_with_mask(low, pc.invert(bare), cleaned)


# --- e-mail --------------------------------------------------------------------------------

# RFC 5322 dot-atom local part (unquoted), ASCII. Quoted local parts are not accepted.
_ATEXT = r"[a-z0-9!#$%&'*+/=?^_`{|}~-]"
_LOCAL = rf"{_ATEXT}+(?:\.{_ATEXT}+)*"
_LOCAL_RE = re.compile(_LOCAL)
_MAX_LOCAL_LENGTH = 64
_MAX_EMAIL_LENGTH = 254


def normalize_email(value: Any) -> str:
    """An e-mail address trimmed and lower-cased for matching, its syntax checked (no DNS).

    The local part must be an unquoted dot-atom of at most 64 characters (international
    letters allowed); the domain follows :func:`normalize_domain`'s host rules and is written in
    punycode: ``" Jane.Doe@Bücher.DE "`` → ``"jane.doe@xn--bcher-kva.de"``.
    """
    original = _text(value, "email")
    text = original.lower()
    if text.startswith("mailto:"):
        text = text.removeprefix("mailto:")
    if text.count("@") != 1:
        raise NormalizationError(f"email {original!r} must contain exactly one @")
    local, domain = text.split("@")
    if not local:
        raise NormalizationError(f"email {original!r} has nothing before the @")
    if any(char.isspace() for char in text):
        raise NormalizationError(f"email {original!r} contains spaces")
    if len(local.encode()) > _MAX_LOCAL_LENGTH:
        raise NormalizationError(f"email {original!r} has a local part longer than {_MAX_LOCAL_LENGTH} bytes")
    ascii_local = "".join("a" if not char.isascii() and char.isalnum() else char for char in local)
    if not _LOCAL_RE.fullmatch(ascii_local):
        raise NormalizationError(
            f"email {original!r} has an invalid part before the @ (dots may not lead, trail or repeat; "
            "quotes, commas, brackets and spaces are not allowed)"
        )
    if not domain:
        raise NormalizationError(f"email {original!r} has nothing after the @")
    try:
        host = _check_host(domain if domain.isascii() else _punycode(domain), original)
    except idna.IDNAError as exc:
        raise NormalizationError(f"email {original!r} has an invalid domain: {exc}") from exc
    except NormalizationError as exc:
        raise NormalizationError(f"email {original!r} has an invalid domain: {exc}") from exc
    address = f"{local}@{host}"
    if len(address) > _MAX_EMAIL_LENGTH:
        raise NormalizationError(f"email {original!r} is longer than {_MAX_EMAIL_LENGTH} characters")
    return address


def _fast_emails(text: pa.Array) -> pa.Array:
    """Vectorised :func:`normalize_email` for plain ASCII addresses; null where it cannot decide."""
    address = pc.utf8_lower(pc.utf8_trim_whitespace(text))
    decided = pc.and_(
        pc.match_substring_regex(address, f"^{_LOCAL}@{_HOST}$"),
        pc.and_(
            pc.less_equal(pc.find_substring(address, "@"), _MAX_LOCAL_LENGTH),
            pc.less_equal(pc.utf8_length(address), _MAX_EMAIL_LENGTH),
        ),
    )
    return pc.if_else(decided, address, None)


# --- phone ---------------------------------------------------------------------------------


def check_region(default_region: str) -> str:
    """``default_region`` upper-cased, or a ``ValueError`` naming it if phonenumbers does not know it."""
    region = default_region.upper()
    if region not in phonenumbers.SUPPORTED_REGIONS:
        raise ValueError(
            f"default_region {default_region!r} is not a region phonenumbers knows; "
            "use a two-letter ISO 3166 code such as 'US' or 'GB'"
        )
    return region


_MAX_PHONE_INPUT = 250  # phonenumbers refuses longer inputs as too long


def _e164(text: str, region: str) -> str:
    try:
        number = phonenumbers.parse(text, region)
    except phonenumbers.NumberParseException as exc:
        raise NormalizationError(f"phone number {text!r} cannot be read: {exc._msg}") from exc
    if number.extension:
        raise NormalizationError(
            f"phone number {text!r} has an extension ({number.extension}), which E.164 cannot carry"
        )
    if not phonenumbers.is_possible_number(number):
        raise NormalizationError(
            f"phone number {text!r} has the wrong number of digits for country code +{number.country_code}"
        )
    e164 = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
    if _may_read_back_differently(number, e164):
        try:
            again = phonenumbers.format_number(phonenumbers.parse(e164), phonenumbers.PhoneNumberFormat.E164)
        except phonenumbers.NumberParseException:
            again = None
        if again != e164:
            raise NormalizationError(
                f"phone number {text!r} is ambiguous: its E.164 form {e164} does not read back as itself "
                "(check the zeros or the trunk prefix after the country code)"
            )
    return e164


def _may_read_back_differently(number: phonenumbers.PhoneNumber, e164: str) -> bool:
    # phonenumbers strips a national (trunk) prefix it finds after the country code, so an E.164
    # form whose national digits start with one may read back as another number; the rule must
    # give its own output back unchanged (syncs compare normalised values run after run).
    code = number.country_code or 0
    metadata = phonenumbers.PhoneMetadata.metadata_for_region_or_calling_code(
        code, phonenumbers.region_code_for_country_code(code)
    )
    prefix = metadata.national_prefix_for_parsing if metadata is not None else None
    return prefix is not None and re.match(prefix, e164[1 + len(str(code)) :]) is not None


def normalize_phone(value: Any, default_region: str = "US") -> str:
    """A phone number in E.164 (``+`` then up to 15 digits), read with ``phonenumbers``.

    Numbers written without ``+`` are read as numbers of ``default_region`` (ISO 3166 code).
    Rejects numbers that cannot be parsed, have the wrong length for their country
    (``phonenumbers.is_possible_number``) or carry an extension.
    """
    return _e164(_text(value, "phone number"), check_region(default_region))


# --- URLs ----------------------------------------------------------------------------------


def normalize_profile_url(value: Any) -> str:
    """A profile URL in canonical form: https, lower-case host; no port, query, fragment, trailing slash.

    ``"http://WWW.Example.com/in/Jane/?trk=x"`` → ``"https://www.example.com/in/Jane"``; a
    missing scheme means https. The path keeps its case (profile slugs may be case-sensitive).
    """
    original = _text(value, "profile URL")
    text = original if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", original) else f"https://{original}"
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https"):
        raise NormalizationError(f"profile URL {original!r} must use http or https, not {parts.scheme}")
    if not parts.hostname:
        raise NormalizationError(f"profile URL {original!r} has no host")
    host = parts.hostname.rstrip(".")
    if not host.isascii():
        try:
            host = _punycode(host)
        except idna.IDNAError as exc:
            raise NormalizationError(f"profile URL {original!r} has an invalid host: {exc}") from exc
    try:
        _check_host(host, host)
    except NormalizationError as exc:
        raise NormalizationError(f"profile URL {original!r} has an invalid host: {exc}") from exc
    path = parts.path.rstrip("/")
    if not path:
        raise NormalizationError(f"profile URL {original!r} has no path, so it names no profile")
    if any(char.isspace() for char in path):
        raise NormalizationError(f"profile URL {original!r} contains spaces")
    return urlunsplit(("https", host, path, "", ""))


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
        problem = _text_problem(value)
        if problem is not None:
            raise NormalizationError(problem)
        return value
    return _json_safe(value, 0)


def _json_safe(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        # Within JSON a control character is written escaped; a lone surrogate cannot be.
        surrogate = None if value.isascii() else _SURROGATE.search(value)
        if surrogate is not None:
            raise NormalizationError(_lone_surrogate(ord(surrogate.group())))
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
        problem = _text_problem(value)
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


# --- whole columns -------------------------------------------------------------------------


@dataclass
class ColumnResult:
    """One column after a rule: ``values[i]`` is the normalised value of position ``i`` (``None``
    when missing or rejected) and ``errors`` maps positions to the reason they were rejected.
    """

    values: list[Any]
    errors: dict[int, str] = field(default_factory=dict)


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
    """:func:`normalize_phone` of phone keys that are ten-digit North American numbers; null for others.

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
    decided = pc.if_else(pc.match_substring_regex(keys, r"^\+1[2-9][0-9]{9}$"), keys, None)
    if region == "US":
        national = pc.match_substring_regex(keys, r"^[2-9][0-9]{9}$")
        decided = pc.if_else(national, pc.binary_join_element_wise("+1", keys, ""), decided)
    return decided


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
    # Free text is its trimmed self: blanks and control characters never reach a fast path.
    normalize_text: partial(pc.utf8_trim, characters=PYTHON_WHITESPACE),
}
_CACHE_KEYS: dict[Callable[..., Any], Callable[[pa.Array], pa.Array]] = {normalize_phone: _phone_keys}
# Rules that turn text into lists or dicts: cached outputs are shared, so each row gets a copy.
_CONTAINER_RULES = frozenset({normalize_personas, parse_connection_paths, parse_json})


def normalize_column(series: pd.Series, rule: Callable[[Any], Any]) -> ColumnResult:
    """Apply ``rule`` to every value of ``series`` (by position), missing values giving ``None``.

    Use ``functools.partial`` for rules with options, e.g.
    ``normalize_column(s, partial(normalize_phone, default_region="GB"))``, and reuse one rule
    object for all the chunks of an extract. The result is the same as calling the rule on
    each value: domains and e-mails take a vectorised fast path, and outcomes are cached per
    rule and distinct value across calls (phone numbers per distinct number, whatever their
    layout), since extracts repeat values (account domains, switchboard numbers). Text holding a
    control character (tab and line breaks aside) or a lone surrogate is rejected for it, with
    the reason the text rules give, whatever the rule (A32).
    """
    raw = series.tolist()
    result = ColumnResult([None] * len(raw))
    if not raw:
        return result
    if pd.api.types.infer_dtype(series, skipna=True) == "string":
        try:
            text = pa.array(raw, type=pa.string())
        except UnicodeEncodeError:  # a lone surrogate, which Arrow's UTF-8 cannot hold
            pass
        else:
            return _normalize_text_column(raw, text, rule, result)
    pending = [position for position, value in enumerate(raw) if not is_missing(value)]
    _apply(rule, raw, pending, result)
    return result


def _normalize_text_column(
    raw: list[Any], text: pa.Array, rule: Callable[[Any], Any], result: ColumnResult
) -> ColumnResult:
    """:func:`normalize_column` for a column of text (what every CSV gives), without a Python
    step per row beyond the missing-value test: the fast path decides what it can, then the
    rule runs once per distinct key and the outcomes are spread back by position."""
    function = rule.func if isinstance(rule, partial) else rule
    values = np.full(len(raw), None, dtype=object)
    # Present: not null, and not blank by str.strip()'s measure (hence its whitespace set).
    trimmed = pc.utf8_trim(text, characters=PYTHON_WHITESPACE)
    pending = pc.fill_null(pc.greater(pc.utf8_length(trimmed), 0), False).to_numpy(zero_copy_only=False)
    for position, problem in text_problems(text, trimmed, raw).items():
        if pending[position]:
            result.errors[position] = problem
            pending[position] = False
    make_keys = _CACHE_KEYS.get(function)
    keys = make_keys(text) if make_keys is not None else None
    fast = _FAST_PATHS.get(function)
    decided = None
    if fast is not None:
        # Only ASCII values: beyond it Arrow's and Python's case mapping differ ("İ").
        decided = pc.if_else(pc.fill_null(pc.string_is_ascii(text), False), fast(text), None)
    elif function is normalize_phone and keys is not None and _NANP_SHORTCUT:
        region = _phone_region(rule)
        if region is not None:
            decided = _fast_phones(keys, region)
    if decided is not None:
        done = pending & pc.is_valid(decided).to_numpy(zero_copy_only=False)
        # Python strings are made for the decided values only.
        values[done] = decided.filter(pa.array(done)).to_numpy(zero_copy_only=False)
        pending &= ~done
    positions = np.flatnonzero(pending)
    if positions.size:
        inputs = np.asarray(raw, dtype=object)[positions]
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
        outputs = np.empty(len(outcomes), dtype=object)
        outputs[:] = [output for _, output in outcomes]
        good = passed[codes]
        values[positions[good]] = outputs[codes[good]]
        for position in positions[~good].tolist():
            # A failure's reason quotes the input, so it is computed from the value as written.
            result.errors[position] = _cached_outcome(rule, raw[position])[1]
    result.values = values.tolist()
    if function in _CONTAINER_RULES:
        result.values = [copy.deepcopy(value) if value is not None else None for value in result.values]

    return result


def _apply(rule: Callable[[Any], Any], raw: list[Any], positions: list[int], result: ColumnResult) -> None:
    """:func:`normalize_column` for typed values (SQL, Parquet, JSON): the rule on each position."""
    for position in positions:
        value = raw[position]
        problem = _text_problem(value) if isinstance(value, str) else None
        if problem is not None:
            result.errors[position] = problem
            continue
        try:
            ok, output = _cached_outcome(rule, value)
        except TypeError:  # unhashable: lists and dicts from JSON columns
            ok, output = _outcome(rule, value)
        if not ok:
            result.errors[position] = output
        elif isinstance(output, (list, dict)):
            # Cached lists and dicts are shared; each row gets its own copy to change freely.
            result.values[position] = copy.deepcopy(output)
        else:
            result.values[position] = output


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
