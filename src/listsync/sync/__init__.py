"""The data work of the syncs: read extracts, normalise and validate them, plan and apply changes.

Reading and cleaning (this package's entry points for every job)::

    from listsync.sync import Rejects, prepare_people, read_extract

    with Rejects("rejects.jsonl") as rejects:
        prepared = prepare_people(read_extract("people.csv"), column_map, rejects=rejects)
        rejects.check_fraction(prepared.stats.read, max_reject_fraction=0.01)

Submodules are imported lazily by their users; this module imports pandas.
"""

from __future__ import annotations

from listsync.sync.normalize import NORMALIZATION_VERSION, NormalizationError
from listsync.sync.prepare import (
    ColumnMappingError,
    PreparedPeople,
    PreparedRows,
    PrepareStats,
    prepare_people,
    prepare_rows,
)
from listsync.sync.rejects import Rejects, TooManyRejectsError
from listsync.sync.sources import ROW_NUMBER, ExtractError, read_extract

__all__ = [
    "NORMALIZATION_VERSION",
    "ROW_NUMBER",
    "ColumnMappingError",
    "ExtractError",
    "NormalizationError",
    "PrepareStats",
    "PreparedPeople",
    "PreparedRows",
    "Rejects",
    "TooManyRejectsError",
    "prepare_people",
    "prepare_rows",
    "read_extract",
]
