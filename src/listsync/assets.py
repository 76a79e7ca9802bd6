"""The ``listsync`` Asset URI scheme: ``listsync://<service host>[:<port>]/<table_id>`` names a List.

The authority is the host (and port, if the base URL has one) of the service the List lives on,
as the ``listsync`` connection's base URL gives it; the path is the List's ``tableId``::

    Asset("listsync://api.example.com/tbl_accounts")

The provider registers the scheme (``asset-uris`` in :func:`listsync.get_provider_info`), so
Airflow normalises every such URI with :func:`sanitize_uri` when the Asset is built (a DAG that
names no List fails when it is parsed), and the OpenLineage integration turns the Asset into the
same dataset the operators report as their output (:func:`convert_asset_to_openlineage`):
namespace ``listsync://<host>``, name the ``tableId``.

Airflow imports this module while it discovers providers, so it imports nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, urlsplit

if TYPE_CHECKING:
    from airflow.sdk import Asset
    from openlineage.client.event_v2 import Dataset

__all__ = ["SCHEME", "convert_asset_to_openlineage", "sanitize_uri", "service_namespace"]

SCHEME = "listsync"

_FORM = "listsync://<service host>/<table_id>, e.g. listsync://api.example.com/tbl_accounts"


def _authority(parts: SplitResult) -> str:
    """``host`` or ``host:port``, the host lower-cased (host names ignore case)."""
    if not parts.hostname:
        raise ValueError(f"a listsync URI must name the service's host: {_FORM}")
    return f"{parts.hostname}:{parts.port}" if parts.port is not None else parts.hostname


def service_namespace(base_url: str) -> str:
    """The OpenLineage namespace of what the service at ``base_url`` holds:
    ``listsync://<host>[:<port>]``."""
    return f"{SCHEME}://{_authority(urlsplit(base_url))}"


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Normalise a ``listsync`` Asset URI (Airflow's ``asset-uris`` handler).

    The host is lower-cased; the path must be one ``tableId``.

    :raises ValueError: the URI names no host, carries a user, names no List or more than a
        List (a path of several segments), or has a query.
    """
    authority = _authority(uri)
    if uri.username:
        raise ValueError(f"a listsync URI names the service, not a user ({uri.username!r}@): {_FORM}")
    table_id, *rest = uri.path.strip("/").split("/")
    if not table_id or rest:
        raise ValueError(f"a listsync URI's path is one List id, got {uri.path!r}: {_FORM}")
    if uri.query:
        raise ValueError(f"a listsync URI takes no query, got {uri.query!r}: {_FORM}")
    return uri._replace(netloc=authority, path=f"/{table_id}")


def convert_asset_to_openlineage(asset: Asset, lineage_context: Any) -> Dataset:
    """The OpenLineage dataset of a ``listsync`` Asset (Airflow's ``to_openlineage_converter``):
    namespace ``listsync://<host>``, name the ``tableId``, as the operators report the List."""
    from openlineage.client.event_v2 import Dataset

    parts = urlsplit(asset.uri)
    return Dataset(namespace=f"{SCHEME}://{parts.netloc}", name=parts.path.lstrip("/"))
