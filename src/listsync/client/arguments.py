"""Checks of what a client is made with, before any request: the service's base URL, the API key,
a List's id. The command line runs the same checks on its options, to name the option at fault.
"""

from __future__ import annotations

from urllib.parse import urlsplit


def check_base_url(base_url: str) -> None:
    """:raises ValueError: ``base_url`` is not an http or https URL with a host."""
    try:
        parts = urlsplit(base_url)
        usable = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
    except ValueError:  # an unparsable port or IPv6 address
        usable = False
    if not usable or any(char.isspace() for char in base_url):
        raise ValueError(
            f"base URL {base_url!r} is not an http(s) URL; give the service's address, "
            "e.g. https://api.example.com"
        )


def check_api_key(api_key: str) -> str:
    """The key without the whitespace around it (a key read from a file often ends with a newline).

    :raises ValueError: the key holds a character HTTP headers cannot carry as is (sent anyway,
        the HTTP layer would refuse it and quote it, key included, in its error).
    """
    api_key = api_key.strip()
    if any(not 0x21 <= ord(char) <= 0x7E for char in api_key):
        raise ValueError("api_key may hold only visible ASCII characters (not shown here)")
    return api_key


def check_table_id(table_id: str) -> None:
    """:raises ValueError: an id that no encoding keeps inside its own path segment (empty, ``.``,
    ``..``, a slash or a control character)."""
    if (
        not isinstance(table_id, str)
        or not table_id.strip()
        or table_id.strip() in (".", "..")
        or any(char in "/\\" or ord(char) < 0x20 or ord(char) == 0x7F for char in table_id)
    ):
        raise ValueError(
            f"invalid tableId {table_id!r}: give the List's id as the service shows it "
            "(no slash, no control character, not . or ..)"
        )
