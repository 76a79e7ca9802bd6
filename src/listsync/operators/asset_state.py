"""Where a List sync task keeps its state by default: the Airflow asset state store of its List.

A sync's state (:mod:`listsync.sync.state`) must outlive the task: the next DAG run diffs against
it. Airflow (3.3 and later) keeps state for each asset, with no expiry, through the task's own
supervisor, so a state kept there reaches whichever worker runs the next night. A task whose
inlets or outlets hold its List's asset (``listsync://<service host>/<tableId>``) keeps its state
there, one value for each job, shard and mapping of that List, in Airflow's metadata database (or
where ``[workers] state_store_backend`` offloads values). A worker's write is not held to
``[state_store] max_value_storage_bytes`` (64 KiB by default, a limit of the REST API): a larger
state (about 40 bytes a person as stored) is kept all the same, with a warning naming the
alternatives. Without such an asset, or on an Airflow without the store, the task says so once and
works without a state; ``state_path`` puts the state in a file or in object storage instead.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from listsync.assets import SCHEME
from listsync.sync.state import StateScope

__all__ = ["AssetStateStore", "list_asset_state_store"]

log = logging.getLogger(__name__)


class AssetStateStore:
    """A sync's states in one asset's Airflow state store, a value for each scope
    (:meth:`~listsync.sync.state.StateScope.name`), its bytes as base64 text.

    :param accessor: the asset's accessor, ``context["asset_state_store"][asset]``.
    :param asset_name: the asset's name, for log lines and the summary.
    :param max_bytes: the size above which Airflow advises offloading values (0: none).
    """

    def __init__(self, accessor: Any, asset_name: str, max_bytes: int) -> None:
        self.accessor, self.asset_name, self.max_bytes = accessor, asset_name, max_bytes

    def where(self, scope: StateScope) -> str:
        return f"the asset state store of {self.asset_name}, key {scope.name()}"

    def read(self, scope: StateScope) -> bytes | None:
        value = self.accessor.get(scope.name())
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError(
                f"{self.where(scope)} holds no listsync state; delete the key or run with fresh_state"
            )
        return base64.b64decode(value)

    def write(self, scope: StateScope, data: bytes) -> None:
        from airflow.sdk.exceptions import AirflowRuntimeError

        text = base64.b64encode(data).decode("ascii")
        # The store's JSON of the value: the text and its two quotes.
        if self.max_bytes and len(text) + 2 > self.max_bytes:
            log.warning(
                "The sync state is %d bytes as stored, more than [state_store] max_value_storage_bytes "
                "(%d): Airflow keeps it in its metadata database all the same. To keep it elsewhere, give "
                "the task a state_path (a file or object storage), or set [workers] state_store_backend.",
                len(text) + 2,
                self.max_bytes,
            )
        try:
            self.accessor.set(scope.name(), text)
        except AirflowRuntimeError as error:
            # Everything is written by now: a state not kept costs the next run its three-way diff,
            # not this run its success.
            log.warning(
                "The sync state could not be kept in %s (%s): the next run diffs against the live "
                "List alone. Give the task a state_path to keep it in a file or object storage.",
                self.where(scope),
                error,
            )


def list_asset_state_store(table_id: str, assets: Iterable[Any], context: Any) -> AssetStateStore | None:
    """The state store of the task's asset of List ``table_id`` (among ``assets``, its inlets and
    outlets); None when the task has none, or Airflow no asset state store."""
    accessors = context.get("asset_state_store") if hasattr(context, "get") else None
    if accessors is None:
        return None
    mine = [
        asset
        for asset in assets
        if isinstance(getattr(asset, "uri", None), str)
        and urlsplit(asset.uri).scheme == SCHEME
        and urlsplit(asset.uri).path.strip("/") == table_id
    ]
    if len({asset.name for asset in mine}) != 1:
        return None
    from airflow.sdk.configuration import conf

    offloaded = bool(conf.get("workers", "state_store_backend", fallback=""))
    max_bytes = 0 if offloaded else conf.getint("state_store", "max_value_storage_bytes", fallback=0)
    return AssetStateStore(accessors[mine[0]], mine[0].name, max_bytes)
