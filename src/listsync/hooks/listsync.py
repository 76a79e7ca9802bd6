"""``ListSyncHook``: an Airflow connection turned into a :class:`~listsync.client.ListSyncClient`.

Connection fields: host = base URL, password = API key, extra ``user_id`` (the ``userId`` of List
requests) and ``timeout`` (seconds). Example::

    AIRFLOW_CONN_LISTSYNC_DEFAULT='{"conn_type": "listsync", "host": "http://127.0.0.1:8080",
        "password": "sk_test", "extra": {"user_id": "usr_demo"}}'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import BaseHook

if TYPE_CHECKING:
    import httpx
    from airflow.sdk import Connection

    from listsync.client import ListSyncClient, RetryPolicy

DEFAULT_TIMEOUT = 30.0


class ListSyncHook(BaseHook):
    """Builds a :class:`~listsync.client.ListSyncClient` from an Airflow connection.

    :param listsync_conn_id: the connection id (type ``listsync``).
    :param transport: an httpx transport for the client (tests, or a proxy set-up).
    """

    conn_name_attr = "listsync_conn_id"
    default_conn_name = "listsync_default"
    conn_type = "listsync"
    hook_name = "ListSync"

    def __init__(
        self, listsync_conn_id: str = default_conn_name, *, transport: httpx.BaseTransport | None = None
    ) -> None:
        super().__init__()
        self.listsync_conn_id = listsync_conn_id
        self._transport = transport
        self._client: ListSyncClient | None = None

    def __repr__(self) -> str:
        return f"ListSyncHook(listsync_conn_id={self.listsync_conn_id!r})"

    def get_client(self) -> ListSyncClient:
        """The client for the connection, built on first use and then reused."""
        if self._client is None:
            self._client = self._build_client()
        return self._client

    def get_conn(self) -> ListSyncClient:
        """Same as :meth:`get_client` (Airflow's generic hook interface)."""
        return self.get_client()

    def _build_client(self, retry_policy: RetryPolicy | None = None) -> ListSyncClient:
        from airflow.sdk.log import mask_secret

        from listsync.client import ListSyncClient

        conn = self.get_connection(self.listsync_conn_id)
        base_url = self._base_url(conn)
        if not conn.password:
            raise ValueError(f"connection {self.listsync_conn_id!r} has no password (the API key)")
        # Airflow masks connection passwords already; masking again covers connections built by
        # hand (e.g. from the environment in a plain script) at no cost.
        mask_secret(conn.password)
        # Forms of older Airflow versions store extras with an ``extra__<type>__`` prefix.
        extra = {
            key.removeprefix(f"extra__{self.conn_type}__"): value for key, value in conn.extra_dejson.items()
        }
        timeout = extra.get("timeout")
        return ListSyncClient(
            base_url,
            conn.password,
            extra.get("user_id") or None,
            transport=self._transport,
            timeout=float(timeout) if timeout not in (None, "") else DEFAULT_TIMEOUT,
            retry_policy=retry_policy,
        )

    def get_base_url(self) -> str:
        """The service's base URL the connection names; nothing is sent.

        :raises ValueError: the connection has no host.
        """
        return self._base_url(self.get_connection(self.listsync_conn_id))

    def _base_url(self, conn: Connection) -> str:
        if not conn.host:
            raise ValueError(f"connection {self.listsync_conn_id!r} has no host (the service's base URL)")
        base_url = conn.host if "://" in conn.host else f"https://{conn.host}"
        if conn.port:
            base_url = f"{base_url.rstrip('/')}:{conn.port}"
        return base_url

    def test_connection(self) -> tuple[bool, str]:
        """Call GET /v1/lists once with the connection; ``(True, message)`` when the key is accepted.

        No retries: the person testing a connection wants the answer now.
        """
        from listsync.client import ListSyncError, RetryPolicy

        try:
            with self._build_client(RetryPolicy(max_attempts=1)) as client:
                lists = client.list_lists()
        except (ListSyncError, ValueError) as exc:
            return False, str(exc)
        return True, f"Connected: {len(lists)} List(s) visible"
