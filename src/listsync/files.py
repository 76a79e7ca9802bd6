"""The files a job writes (plan, rejects, state, checkpoint): checked before anything is read,
written as JSON lines to a local path or any object with ``open(mode)`` (object storage)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any, Protocol

from pydantic_core import to_json

__all__ = ["OpenableFile", "check_output_file", "json_line", "write_json_lines"]


class OpenableFile(Protocol):
    """Anything with ``open(mode)``, such as ``pathlib.Path`` or Airflow's ``ObjectStoragePath``."""

    def open(self, mode: str = ...) -> IO[Any]: ...  # pragma: no cover - protocol


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


def write_json_lines(
    entries: Iterable[Mapping[str, Any]],
    path: str | os.PathLike[str] | OpenableFile | None = None,
    *,
    prefix: str = "listsync-plan-",
) -> str:
    """Write ``entries`` as JSON lines and return where they went.

    A plan file holds one planned action a line, e.g. ``{"action": "patch", "account_domain":
    ..., "identity": ..., "changes": {"title": {"before": "CTO", "after": "CEO"}}}``; values must
    be JSON-serialisable. Keys keep their order, so a plan file diffs well between runs.

    :param entries: the lines' objects, in order.
    :param path: a local path, an object with ``open(mode)`` (e.g. ``ObjectStoragePath``), or
        None for a new file in the system temporary directory.
    :param prefix: the file name prefix used when ``path`` is None.
    :return: the path written, as a string (for the summary).
    """
    if path is None:
        # delete=False: the file is the product; the summary tells the caller where it is.
        with tempfile.NamedTemporaryFile(
            "w", prefix=prefix, suffix=".jsonl", delete=False, encoding="utf-8"
        ) as handle:
            _write_lines(entries, handle)
            return handle.name
    if isinstance(path, str | os.PathLike):
        local = Path(path)
        local.parent.mkdir(parents=True, exist_ok=True)
        with local.open("w", encoding="utf-8") as handle:
            _write_lines(entries, handle)
        return str(local)
    with path.open("w") as handle:
        _write_lines(entries, handle)
    return str(path)


def json_line(entry: Mapping[str, Any]) -> str:
    """One line of a JSON-lines file as :func:`write_json_lines` writes it, newline included:
    compact, keys in their order, text as it is (not escaped to ASCII), a value JSON has no form
    for as its ``str``. Made by pydantic's serializer (five times ``json.dumps``'s speed)."""
    return to_json(entry, fallback=str).decode("utf-8") + "\n"


def _write_lines(entries: Iterable[Mapping[str, Any]], handle: IO[Any]) -> None:
    for entry in entries:
        handle.write(json_line(entry))
