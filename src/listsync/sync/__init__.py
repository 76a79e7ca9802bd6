"""The data work of the syncs: read extracts, normalise and validate them, plan and apply changes.

Reading and cleaning (this package's entry points for every job)::

    from listsync.sync import Rejects, prepare_people, read_extract

    with Rejects("rejects.jsonl") as rejects:
        prepared = prepare_people(read_extract("people.csv"), column_map, rejects=rejects)
        rejects.check_fraction(prepared.stats.read, max_reject_fraction=0.01)

The names below load their module on first use (PEP 562): importing the package, or a light
submodule such as :mod:`listsync.sync.options` (the settings an operator checks when its DAG is
parsed), does not import pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from listsync.lazy import lazy_names

if TYPE_CHECKING:
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

_MODULES = {
    "NORMALIZATION_VERSION": "listsync.sync.normalize",
    "NormalizationError": "listsync.sync.normalize",
    "ColumnMappingError": "listsync.sync.prepare",
    "PreparedPeople": "listsync.sync.prepare",
    "PreparedRows": "listsync.sync.prepare",
    "PrepareStats": "listsync.sync.prepare",
    "prepare_people": "listsync.sync.prepare",
    "prepare_rows": "listsync.sync.prepare",
    "Rejects": "listsync.sync.rejects",
    "TooManyRejectsError": "listsync.sync.rejects",
    "ROW_NUMBER": "listsync.sync.sources",
    "ExtractError": "listsync.sync.sources",
    "read_extract": "listsync.sync.sources",
}


__getattr__, __dir__ = lazy_names(__name__, _MODULES, __all__)
