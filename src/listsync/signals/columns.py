"""How an extract's columns become signal events: :class:`EventMapping`, importable without pandas
(an operator checks its mapping when its DAG is parsed)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DATA",
    "DATA_PREFIX",
    "IDENTITY_ID",
    "IDENTITY_TYPE",
    "REFERENCE",
    "SIGNAL",
    "TIMESTAMP",
    "EventMapping",
]


# --- event ingestion -----------------------------------------------------------------------

# Event fields as targets of the column map (see EventMapping.column_map).
SIGNAL = "signal"
IDENTITY_TYPE = "identity_type"
IDENTITY_ID = "identity_id"
DATA = "data"
DATA_PREFIX = "data."
TIMESTAMP = "timestamp"
REFERENCE = "reference"


@dataclass(frozen=True)
class EventMapping:
    """How the columns of an extract become signal events (spec §2.3).

    Give exactly one of each pair: ``signal`` (every row the same signal slug) or
    ``signal_column``; ``identity_type`` or ``identity_type_column``; ``data_columns`` (packed into
    ``data`` under their column names) or ``data_column`` (a JSON object per row), or neither for
    events without data. ``timestamp_column`` and ``reference_column`` are optional: without a
    timestamp the service stamps the event on arrival; without a reference one is derived
    (:func:`~listsync.signals.build.event_reference`). ``version`` is a schema version number
    or ``"latest"``.

    :raises ValueError: when a pair is given twice or not at all, naming the parameters.
    """

    identity_id_column: str
    signal: str | None = None
    signal_column: str | None = None
    identity_type: str | None = None
    identity_type_column: str | None = None
    data_columns: Sequence[str] | None = None
    data_column: str | None = None
    timestamp_column: str | None = None
    reference_column: str | None = None
    version: int | float | str | None = None

    def __post_init__(self) -> None:
        _exactly_one("signal", self.signal, "signal_column", self.signal_column)
        _exactly_one("identity_type", self.identity_type, "identity_type_column", self.identity_type_column)
        if self.data_columns is not None and self.data_column is not None:
            raise ValueError("give data_columns or data_column, not both")
        if isinstance(self.data_columns, str):
            raise ValueError("data_columns must be a list of column names, not a string")
        if self.data_columns is not None:
            object.__setattr__(self, "data_columns", tuple(self.data_columns))
        for name in ("signal", "identity_type"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if not (
            self.version is None
            or self.version == "latest"
            or (isinstance(self.version, (int, float)) and not isinstance(self.version, bool))
        ):
            raise ValueError(f"version must be a number or 'latest', got {self.version!r}")
        columns = self.columns()
        repeated = sorted({column for column in columns if columns.count(column) > 1})
        if repeated:
            raise ValueError(f"each column may be mapped once; mapped more than once: {', '.join(repeated)}")

    def columns(self) -> list[str]:
        """The extract columns this mapping reads, in a stable order."""
        return [column for column, _ in self._targets()]

    def column_map(self) -> dict[str, str]:
        """Extract column → event field, in the form :mod:`listsync.extract.mapping` works with.

        Data columns map to ``data.<column>``; a JSON data column maps to ``data``.
        """
        return dict(self._targets())

    def _targets(self) -> list[tuple[str, str]]:
        named = {
            SIGNAL: self.signal_column,
            IDENTITY_TYPE: self.identity_type_column,
            IDENTITY_ID: self.identity_id_column,
            DATA: self.data_column,
            TIMESTAMP: self.timestamp_column,
            REFERENCE: self.reference_column,
        }
        pairs = [(column, target) for target, column in named.items() if column is not None]
        pairs += [(column, DATA_PREFIX + column) for column in self.data_columns or ()]
        return pairs


def _exactly_one(name: str, value: object, other_name: str, other_value: object) -> None:
    if (value is None) == (other_value is None):
        raise ValueError(f"give exactly one of {name} (a fixed value) or {other_name} (a column)")
