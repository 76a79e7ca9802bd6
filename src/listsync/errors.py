"""The root of every error listsync raises.

Each layer raises its own kinds under :class:`ListSyncError`: the client's tree
(:mod:`listsync.client.errors`: the service refused, the request never arrived...), and the data
work's (``ExtractError``, ``NormalizationError``, ``ColumnMappingError``, ``TooManyRejectsError``,
``UnsafeDeleteError``, ``SyncFailedError``, ``CheckpointMismatchError``...), so a caller catches one
class for anything listsync refused and lets a bug in their own code through.

:func:`warn_aside` is how a failure beside a run's own work (its history row, its alert) is told:
one warning line, the run's outcome unchanged.
"""

from __future__ import annotations

import logging

__all__ = ["ListSyncError", "one_line", "warn_aside"]


class ListSyncError(Exception):
    """Root of every error listsync raises."""


def one_line(error: BaseException) -> str:
    """An error as one line: its class when it says nothing, its first line, at most 500 characters."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if text != type(error).__name__ and not isinstance(error, (ValueError, OSError)):
        text = f"{type(error).__name__}: {text}"
    return text if len(text) <= 500 else text[:497] + "..."


def warn_aside(logger: logging.Logger, what: str, error: BaseException) -> None:
    """Log that ``what`` failed beside a run's own work (a history row, an alert), as one warning
    line ending with why (:func:`one_line`); the traceback only where ``logger`` shows debug
    records (``--debug`` on the command line, a task log at debug level): a run that did its
    work is not buried under the trace of what failed beside it."""
    logger.warning(
        "%s: %s", what, one_line(error), exc_info=error if logger.isEnabledFor(logging.DEBUG) else None
    )
