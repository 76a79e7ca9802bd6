"""Where a List sync task keeps its state and its lease by default: an Airflow asset state store.

A sync's state (:mod:`listsync.sync.state`) must outlive the task: the next DAG run diffs against
it. Airflow (3.3 and later) keeps state for each asset, with no expiry, through the task's own
supervisor, so a state kept there reaches whichever worker runs the next night. A task whose
inlets or outlets hold its List's asset (``listsync://<service host>/<tableId>``) keeps its state
there, one value for each job, shard and mapping of that List, in Airflow's metadata database (or
where ``[workers] state_store_backend`` offloads values). A worker's write is not held to
``[state_store] max_value_storage_bytes`` (64 KiB by default, a limit of the REST API): a larger
state (about 40 bytes a person as stored) is kept all the same, with a warning naming the
alternatives.

A task that names no asset of its List keeps its state all the same: its operator declares the
state asset of its connection (:func:`state_asset`, ``listsync-state://<conn id>``) as an inlet
when the DAG is parsed, without looking the connection up, and the task keeps its states there,
each under the key of its job, List, shard and mapping. A mapped task declares it in
``partial(inlets=[state_asset(conn_id)])``, since its operator is made only as it runs. On an
Airflow without the store, the task says so once and works without a state; ``state_path`` puts
the state in a file or in object storage instead.

The run's lease (:mod:`listsync.sync.lease`) is kept in the same store, under ``lease-<job>-<List>-<shard>``:
the store has get and set but no compare-and-set, so the lease is a
:class:`~listsync.sync.lease.RegisterLease`.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from listsync.assets import SCHEME
from listsync.sync.lease import RegisterLease

if TYPE_CHECKING:
    from listsync.sync.state import StateScope

__all__ = ["STATE_SCHEME", "AssetStateStore", "list_asset_state_store", "state_asset"]

#: The URI scheme of a connection's state asset (:func:`state_asset`).
STATE_SCHEME = "listsync-state"

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

    def lease(self, name: str) -> RegisterLease:
        """The lease ``name`` under a key of this store."""
        return RegisterLease(
            self.accessor, f"lease-{name}", describe=f"the asset state store of {self.asset_name}"
        )

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


def state_asset(conn_id: str) -> Any:
    """The asset whose state store keeps the states and leases of the syncs through connection
    ``conn_id`` that name no asset of their List: ``listsync-state://<conn_id>``."""
    from airflow.sdk import Asset

    return Asset(name=f"listsync_state_{conn_id}", uri=f"{STATE_SCHEME}://{conn_id}")


def names_list(assets: Iterable[Any], table_id: str) -> list[Any]:
    """The assets among ``assets`` that name List ``table_id`` (``listsync://<host>/<table_id>``)."""
    return [
        asset
        for asset in assets
        if isinstance(getattr(asset, "uri", None), str)
        and urlsplit(asset.uri).scheme == SCHEME
        and urlsplit(asset.uri).path.strip("/") == table_id
    ]


def list_asset_state_store(
    table_id: str, assets: Iterable[Any], context: Any, conn_id: str | None = None
) -> AssetStateStore | None:
    """The state store of the task's asset of List ``table_id`` (among ``assets``, its inlets and
    outlets), else of the state asset of ``conn_id`` (:func:`state_asset`) when the task has it;
    None when it has neither, or Airflow no asset state store."""
    accessors = context.get("asset_state_store") if hasattr(context, "get") else None
    if accessors is None:
        return None
    assets = list(assets)
    mine = names_list(assets, table_id)
    if not mine and conn_id is not None:
        mine = [asset for asset in assets if getattr(asset, "uri", None) == state_asset(conn_id).uri]
    if len({asset.name for asset in mine}) != 1:
        return None
    try:
        accessor = accessors[mine[0]]
    except KeyError:  # declared by the operator as it ran, not in the DAG parsed (an old DAG file)
        return None
    from airflow.sdk.configuration import conf

    offloaded = bool(conf.get("workers", "state_store_backend", fallback=""))
    max_bytes = 0 if offloaded else conf.getint("state_store", "max_value_storage_bytes", fallback=0)
    return AssetStateStore(accessor, mine[0].name, max_bytes)
