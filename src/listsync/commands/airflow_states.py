"""The sync states an Airflow deployment's operators keep in asset state stores, reached through
its REST API (``/api/v2/assets/{id}/state-store``) for ``listsync state --airflow-url``.

An operator keeps each state under the key of its job, List, shard and mapping
(:meth:`~listsync.sync.state.StateScope.name`) in the state store of its List's asset
(``listsync://<host>/<tableId>``) or of its connection's state asset (``listsync-state://<conn id>``),
beside its lease (``lease-...``), which is not a state and is left alone here.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx

from listsync.errors import ListSyncError

__all__ = ["TOKEN_ENV", "AirflowStates", "AirflowStatesError"]

#: The environment variable that holds the token of the Airflow REST API.
TOKEN_ENV = "LISTSYNC_AIRFLOW_TOKEN"
#: Entries of a state store asked for a page.
PAGE = 100


class AirflowStatesError(ListSyncError):
    """The deployment cannot be reached, refuses the token, or has no such asset."""


class AirflowStates:
    """The states kept in the asset state stores of the Airflow deployment at ``url``.

    :param url: the API server's address, e.g. ``http://airflow.example.com:8080``.
    :param token: a bearer token of a user who may read (and, to reset, delete) assets.
    """

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout = timeout

    def _call(self, method: str, path: str, **params: Any) -> Any:
        # A request or two a command: no connection is kept between them.
        try:
            response = httpx.request(
                method,
                f"{self.url}/api/v2{path}",
                params=params or None,
                headers=self._headers,
                timeout=self._timeout,
            )
        except httpx.HTTPError as error:
            raise AirflowStatesError(f"cannot reach the Airflow API at {self.url}: {error}") from None
        if response.status_code in (401, 403):
            raise AirflowStatesError(
                f"the Airflow API at {self.url} refused the token in ${TOKEN_ENV} "
                f"({response.status_code}): give a token of a user who may read and delete assets "
                f"(POST {self.url}/auth/token)"
            )
        if response.is_error:
            raise AirflowStatesError(
                f"the Airflow API at {self.url} answered {method} {path} with {response.status_code}: "
                f"{response.text[:300]}"
            )
        return response.json() if response.content else None

    def asset_id(self, uri: str) -> int:
        """The id of the asset whose URI is ``uri``."""
        found = self._call("GET", "/assets", uri_pattern=uri, limit=PAGE)["assets"]
        exact = [asset["id"] for asset in found if asset["uri"] == uri]
        if not exact:
            raise AirflowStatesError(
                f"the Airflow deployment at {self.url} has no asset {uri}; its List assets are "
                "listsync://<host>/<tableId>, its connection state assets listsync-state://<conn id>"
            )
        return int(exact[0])

    def states(self, asset_id: int, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        """The states kept in the asset's state store whose key begins with ``prefix``: each key
        and the state's bytes."""
        offset = 0
        while True:
            page = self._call("GET", f"/assets/{asset_id}/state-store", limit=PAGE, offset=offset)
            entries = page["asset_state_store"]
            for entry in entries:
                key, value = entry["key"], entry["value"]
                # A lease, or a value of another kind, is no state.
                if key.startswith(prefix) and not key.startswith("lease-") and isinstance(value, str):
                    yield key, base64.b64decode(value)
            offset += len(entries)
            if not entries or offset >= page["total_entries"]:
                return

    def delete(self, asset_id: int, key: str) -> None:
        """Delete ``key`` from the asset's state store."""
        self._call("DELETE", f"/assets/{asset_id}/state-store/{quote(key, safe='')}")
