"""``ListEndpoints``: the part of a List client the chunked writers use.

The writers (:mod:`listsync.client.writers`) are built on the client's endpoint methods, not on
the client: they take anything with these methods and attributes, so that the client never needs
to know them and a test may hand them a fake.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from listsync.client.models import (
    AccountDeletes,
    AccountPatches,
    AccountPeople,
    CellUpdate,
    PeoplePage,
    RowAdd,
    RowsPage,
    WriteResult,
)


class ListEndpoints(Protocol):
    """The List writes, a one-item read of a List, and what the client knows of its requests.

    :ivar timeout: seconds per request: a write whose answer was lost may land until about then.
    :ivar last_sent_at: when the last request attempt was sent (``clock``), ``None`` before any.
    :ivar learned_caps: per-request caps the service stated in a refusal, things -> n; the
        writers record them here, where they last as long as the client, and cut later requests
        to them.
    :ivar clock: returns epoch seconds, the clock of ``last_sent_at``.
    """

    timeout: float
    last_sent_at: float | None
    learned_caps: dict[str, int]
    clock: Callable[[], float]

    def add_people(
        self,
        table_id: str,
        accounts: Sequence[AccountPeople | Mapping[str, Any]],
        *,
        duplicate_strategy: str | None = None,
    ) -> WriteResult: ...

    def update_people(
        self, table_id: str, accounts: Sequence[AccountPatches | Mapping[str, Any]]
    ) -> WriteResult: ...

    def delete_people(
        self, table_id: str, accounts: Sequence[AccountDeletes | Mapping[str, Any]]
    ) -> WriteResult: ...

    def add_rows(self, table_id: str, rows: Sequence[RowAdd | Mapping[str, Any]]) -> WriteResult: ...

    def update_cells(
        self, table_id: str, updates: Sequence[CellUpdate | Mapping[str, Any]]
    ) -> WriteResult: ...

    def delete_rows(self, table_id: str, row_ids: Sequence[str]) -> WriteResult: ...

    def get_rows(self, table_id: str, *, limit: int | None = None) -> RowsPage: ...

    def get_targetable_people(self, table_id: str, *, limit: int | None = None) -> PeoplePage: ...
