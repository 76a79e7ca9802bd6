"""Contact rules: account domains, e-mail addresses, phone numbers and profile URLs.

Each rule gives one spelling per contact, so that values written differently in the extract (a
scheme, ``www.``, upper case, another phone layout) match each other and the List: hosts are
lower-case ASCII (punycode for international names), phone numbers E.164, read with
``phonenumbers``. :data:`HOST_PATTERN`, :data:`LOCAL_PART_PATTERN` and the length limits are
public for the column runner's vectorised forms of the domain and e-mail rules, which must
accept no more than the rules do. A change to what a rule gives for some input changes
:data:`~listsync.extract.normalize.NORMALIZATION_VERSION`.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import idna
import phonenumbers

from listsync.extract.text_rules import NormalizationError, trimmed_text

__all__ = [
    "HOST_PATTERN",
    "LOCAL_PART_PATTERN",
    "MAX_DOMAIN_LENGTH",
    "MAX_EMAIL_LENGTH",
    "MAX_LOCAL_PART_LENGTH",
    "check_region",
    "normalize_domain",
    "normalize_email",
    "normalize_phone",
    "normalize_profile_url",
]


# --- domains -------------------------------------------------------------------------------

# One LDH label: letters, digits and inner hyphens, at most 63 characters.
_LABEL = r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)"
# A host of at least two labels whose last label (the TLD) starts with a letter, as every TLD
# does (so an IP address is not a host).
HOST_PATTERN = rf"(?:{_LABEL}\.)+[a-z](?:[a-z0-9-]{{0,61}}[a-z0-9])?"
_HOST_RE = re.compile(HOST_PATTERN)
_SCHEME_RE = re.compile(r"^[a-z][a-z0-9+.-]*://")
MAX_DOMAIN_LENGTH = 253


@lru_cache(maxsize=4096)
def _punycode(host: str) -> str:
    """``host`` in ASCII (IDNA 2008 with UTS 46 mapping); ``idna.IDNAError`` if it cannot be.

    Remembered because an extract repeats its few international domains in every address and
    URL on them, and idna is pure Python (errors are not remembered: they are rare).
    """
    return str(idna.encode(host, uts46=True).decode("ascii"))


def _check_host(host: str, original: str) -> str:
    if len(host) > MAX_DOMAIN_LENGTH:
        raise NormalizationError(f"domain {original!r} is longer than {MAX_DOMAIN_LENGTH} characters")
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
    original = trimmed_text(value, "domain")
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


# --- e-mail --------------------------------------------------------------------------------

# RFC 5322 dot-atom local part (unquoted), ASCII. Quoted local parts are not accepted.
_ATEXT = r"[a-z0-9!#$%&'*+/=?^_`{|}~-]"
LOCAL_PART_PATTERN = rf"{_ATEXT}+(?:\.{_ATEXT}+)*"
_LOCAL_RE = re.compile(LOCAL_PART_PATTERN)
MAX_LOCAL_PART_LENGTH = 64
MAX_EMAIL_LENGTH = 254


def normalize_email(value: Any) -> str:
    """An e-mail address trimmed and lower-cased for matching, its syntax checked (no DNS).

    The local part must be an unquoted dot-atom of at most 64 characters (international
    letters allowed); the domain follows :func:`normalize_domain`'s host rules and is written in
    punycode: ``" Jane.Doe@Bücher.DE "`` → ``"jane.doe@xn--bcher-kva.de"``.
    """
    original = trimmed_text(value, "email")
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
    if len(local.encode()) > MAX_LOCAL_PART_LENGTH:
        raise NormalizationError(
            f"email {original!r} has a local part longer than {MAX_LOCAL_PART_LENGTH} bytes"
        )
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
    if len(address) > MAX_EMAIL_LENGTH:
        raise NormalizationError(f"email {original!r} is longer than {MAX_EMAIL_LENGTH} characters")
    return address


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
    return _e164(trimmed_text(value, "phone number"), check_region(default_region))


# --- URLs ----------------------------------------------------------------------------------


def normalize_profile_url(value: Any) -> str:
    """A profile URL in canonical form: https, lower-case host; no port, query, fragment, trailing slash.

    ``"http://WWW.Example.com/in/Jane/?trk=x"`` → ``"https://www.example.com/in/Jane"``; a
    missing scheme means https. The path keeps its case (profile slugs may be case-sensitive).
    """
    original = trimmed_text(value, "profile URL")
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
