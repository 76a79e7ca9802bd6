"""Operators of the listsync provider.

``from listsync.operators import UpsertRowsOperator`` loads that operator's module on first use
(PEP 562), so importing the package costs nothing and one operator does not load the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from listsync.lazy import lazy_names

if TYPE_CHECKING:
    from listsync.operators.people import SplitPeopleOperator, SyncTargetablePeopleOperator
    from listsync.operators.rows import UpsertRowsOperator
    from listsync.operators.signals import IngestSignalsOperator

__all__ = [
    "IngestSignalsOperator",
    "SplitPeopleOperator",
    "SyncTargetablePeopleOperator",
    "UpsertRowsOperator",
]

_MODULES = {
    "IngestSignalsOperator": "listsync.operators.signals",
    "SplitPeopleOperator": "listsync.operators.people",
    "SyncTargetablePeopleOperator": "listsync.operators.people",
    "UpsertRowsOperator": "listsync.operators.rows",
}


__getattr__, __dir__ = lazy_names(__name__, _MODULES, __all__)
