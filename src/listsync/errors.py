"""The root of every error listsync raises.

Each layer raises its own kinds under :class:`ListSyncError`: the client's tree
(:mod:`listsync.client.errors`: the service refused, the request never arrived...), and the data
work's (``ExtractError``, ``NormalizationError``, ``ColumnMappingError``, ``TooManyRejectsError``,
``UnsafeDeleteError``, ``SyncFailedError``, ``CheckpointMismatchError``...), so a caller catches one
class for anything listsync refused and lets a bug in their own code through.
"""

from __future__ import annotations

__all__ = ["ListSyncError"]


class ListSyncError(Exception):
    """Root of every error listsync raises."""
