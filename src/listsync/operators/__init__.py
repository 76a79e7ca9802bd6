"""Operators of the listsync provider.

``from listsync.operators import UpsertRowsOperator`` loads that operator's module on first use
(PEP 562), so importing the package costs nothing and one operator does not load the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
