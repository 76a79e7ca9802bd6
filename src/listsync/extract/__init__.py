"""Reading and cleaning extracts, the first step of every job: sources (files, SQL), the CSV
reader, normalisation and validation rules, the column map, and rejects with their reasons.

::

    from listsync.extract import Rejects, read_extract

    with Rejects("rejects.jsonl") as rejects:
        frames = read_extract("people.csv")   # chunks of a CSV, Parquet or JSON lines file, or SQL

The names below load their module on first use (PEP 562): importing the package, or a light
submodule such as :mod:`listsync.extract.options` (what an operator checks when its DAG is
parsed), does not import pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from listsync.lazy import lazy_names

if TYPE_CHECKING:
    from listsync.extract.mapping import ColumnMappingError, PrepareStats
    from listsync.extract.normalize import NORMALIZATION_VERSION
    from listsync.extract.options import ExtractError
    from listsync.extract.rejects import Rejects, TooManyRejectsError
    from listsync.extract.sources import ROW_NUMBER, read_extract
    from listsync.extract.text_rules import NormalizationError

__all__ = [
    "NORMALIZATION_VERSION",
    "ROW_NUMBER",
    "ColumnMappingError",
    "ExtractError",
    "NormalizationError",
    "PrepareStats",
    "Rejects",
    "TooManyRejectsError",
    "read_extract",
]

_MODULES = {
    "NORMALIZATION_VERSION": "listsync.extract.normalize",
    "NormalizationError": "listsync.extract.text_rules",
    "ColumnMappingError": "listsync.extract.mapping",
    "PrepareStats": "listsync.extract.mapping",
    "ExtractError": "listsync.extract.options",
    "Rejects": "listsync.extract.rejects",
    "TooManyRejectsError": "listsync.extract.rejects",
    "ROW_NUMBER": "listsync.extract.sources",
    "read_extract": "listsync.extract.sources",
}


__getattr__, __dir__ = lazy_names(__name__, _MODULES, __all__)
