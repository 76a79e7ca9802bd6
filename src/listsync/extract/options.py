"""What reading an extract checks before it starts, importable without pandas.

An operator checks its settings in its ``__init__``, so that a mistake fails when the DAG is
parsed: the encoding, the time zone of naive timestamps, the files a job writes, the shard of a
sharded run. This module imports no heavy library, nor any module that does.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from dataclasses import dataclass
from datetime import timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from listsync.errors import ListSyncError

__all__ = [
    "ExtractError",
    "Shard",
    "check_encoding",
    "parse_shard",
    "resolve_timezone",
    "shard_number",
]


# --- extracts ------------------------------------------------------------------------------


class ExtractError(ListSyncError, ValueError):
    """The extract cannot be read as asked; the message says what to change."""


def check_encoding(encoding: str) -> None:
    """:raises ExtractError: ``encoding`` names no text encoding Python knows."""
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ExtractError(
            f"unknown encoding {encoding!r}: give one such as utf-8, latin-1, cp1252 or utf-16"
        ) from None


def resolve_timezone(name: str | tzinfo) -> tzinfo:
    """A tzinfo from an IANA name (``"UTC"``, ``"Europe/Paris"``) or a tzinfo; ``ValueError`` if unknown."""
    if isinstance(name, tzinfo):
        return name
    if name.upper() == "UTC":
        return timezone.utc
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"naive_timezone {name!r} is not an IANA time zone name such as 'UTC'") from exc


# --- shards of a List sync ----------------------------------------------------------------


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``: the accounts (people) or keys (rows) whose normalised text
    hashes to ``index``, on the extract's side and the List's alike.

    The hash is BLAKE2b of the UTF-8 text, its first 8 bytes as an integer, modulo ``count``: the
    same on every machine and Python version, unlike ``hash()``.
    """

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, key: str) -> bool:
        """Whether the normalised account domain or row key ``key`` is in this shard."""
        return shard_number(key, self.count) == self.index


def shard_number(key: str, count: int) -> int:
    """The shard, of ``count``, of the normalised account domain or row key ``key`` (see
    :class:`Shard`)."""
    # surrogatepass: a lone surrogate cannot be UTF-8, yet its row must land in one shard.
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def parse_shard(shard: str | Shard | None) -> Shard | None:
    """The shard ``"i/n"`` names (``"0/4"`` is the first of four); None for None (no sharding).

    :raises ValueError: not two whole numbers ``i/n`` with ``n >= 1`` and ``0 <= i < n``.
    """
    if shard is None or isinstance(shard, Shard):
        return shard
    match = re.fullmatch(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", str(shard))
    if match is None or not int(match[1]) < int(match[2]):
        raise ValueError(
            f'shard must be "i/n" with 0 <= i < n, such as "0/4" (the first of four); got {shard!r}'
        )
    return Shard(int(match[1]), int(match[2]))
