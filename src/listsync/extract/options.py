"""What reading an extract checks before it starts, importable without pandas.

An operator checks its settings in its ``__init__``, so that a mistake fails when the DAG is
parsed: the encoding, the time zone of naive timestamps, the files a job writes, the shard of a
sharded run. This module imports no heavy library, nor any module that does.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from datetime import timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from listsync.errors import ListSyncError

__all__ = [
    "ExtractError",
    "Shard",
    "check_encoding",
    "check_output_file",
    "parse_shard",
    "resolve_timezone",
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


# --- the files a job writes ----------------------------------------------------------------


def check_output_file(path: str | os.PathLike[str], what: str, advice: str) -> None:
    """Check that a job can write its file (rejects, plan, checkpoint) at the local ``path``,
    creating the folder as the job would; a URI (object storage) is left to its store.

    Called before anything is read or sent, so that a run does not fail, its work done, for a
    file it cannot keep.

    :param what: the file, for the message ("the rejects file").
    :param advice: what to do, naming the option or parameter that gave the path.
    :raises ValueError: ``cannot write <what> <path> (<reason>); <advice>``.
    """
    if "://" in os.fspath(path):
        return
    target = os.path.abspath(path)
    try:
        if os.path.isdir(target):
            raise IsADirectoryError(f"{target} is a folder")
        folder = os.path.dirname(target)
        os.makedirs(folder, exist_ok=True)
        if os.path.exists(target) and not os.access(target, os.W_OK):
            raise PermissionError(f"{target} is read-only")
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ValueError(f"cannot write {what} {os.fspath(path)} ({exc.strerror or exc}); {advice}") from None


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
        # surrogatepass: a lone surrogate cannot be UTF-8, yet its row must land in one shard.
        digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        return int.from_bytes(digest, "big") % self.count == self.index


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
