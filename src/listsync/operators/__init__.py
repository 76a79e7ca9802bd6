"""Operators of the listsync provider.

``from listsync.operators import UpsertRowsOperator`` loads that operator's module on first use
(PEP 562), so importing the package costs nothing and one operator does not load the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from listsync.lazy import lazy_names

if TYPE_CHECKING:
    from listsync.operators.people import SyncTargetablePeopleOperator
    from listsync.operators.rows import UpsertRowsOperator
    from listsync.operators.signals import IngestSignalsOperator

__all__ = ["IngestSignalsOperator", "SyncTargetablePeopleOperator", "UpsertRowsOperator"]

_MODULES = {
    "IngestSignalsOperator": "listsync.operators.signals",
    "SyncTargetablePeopleOperator": "listsync.operators.people",
    "UpsertRowsOperator": "listsync.operators.rows",
}


__getattr__, __dir__ = lazy_names(__name__, _MODULES, __all__)
