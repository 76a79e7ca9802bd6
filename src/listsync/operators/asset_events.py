"""A List's asset event: emitted when a sync wrote to the List, and only then.

Airflow emits an event for every Asset a task declares as an outlet whenever the task succeeds, so
a dry run, or a night with nothing to write, would trigger every DAG scheduled on the List. A List
operator therefore declares its List as an inlet (where its state store lives, and what it reads)
and an :class:`~airflow.sdk.AssetAlias` as its outlet; when its sync wrote something, it adds the
List's event to each alias of its outlets, its counts in the event's ``extra``. A DAG scheduled
on the List's Asset runs after writes, never after a dry run or a run that changed nothing::

    ACCOUNTS = Asset(uri="listsync://api.example.com/tbl_accounts", name="listsync_tbl_accounts")
    SyncTargetablePeopleOperator(
        ..., inlets=[ACCOUNTS], outlets=[AssetAlias("listsync_tbl_accounts_changed")]
    )

The List's Asset is the one among the task's inlets and outlets whose URI names the task's List
(its name kept), else ``listsync://<host of the connection>/<tableId>`` (named by its URI): what a
mapped task writing to several Lists gives each map index, so each List gets its own event.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from listsync.assets import SCHEME, service_namespace
from listsync.sync.summary import WRITE_COUNTS, counts_of

__all__ = ["emit_list_event", "written"]

log = logging.getLogger(__name__)


def written(summary: Mapping[str, Any]) -> int:
    """How many people or rows a sync's ``summary`` says it added, changed or deleted."""
    return sum(int(summary.get(name) or 0) for name in WRITE_COUNTS)


def emit_list_event(
    context: Any, table_id: str, assets: Iterable[Any], base_url: str, summary: Mapping[str, Any]
) -> bool:
    """Add the List's event to every asset alias among ``assets`` (the task's inlets and outlets)
    when ``summary`` counts writes; return whether an event was added.

    :param context: the task's context (its ``outlet_events``).
    :param base_url: the service's base URL, naming the List's Asset when the task declares none.
    """
    from airflow.sdk import Asset, AssetAlias

    declared = list(assets)
    aliases = [asset for asset in declared if isinstance(asset, AssetAlias)]
    if not aliases or not written(summary):
        return False
    named = [
        asset
        for asset in declared
        if isinstance(asset, Asset)
        and urlsplit(asset.uri).scheme == SCHEME
        and urlsplit(asset.uri).path.strip("/") == table_id
    ]
    asset = named[0] if named else Asset(uri=f"{service_namespace(base_url)}/{table_id}")
    extra = counts_of(summary)
    extra["requests"] = extra.pop("requests_total", 0)
    for alias in aliases:
        context["outlet_events"][alias].add(asset, extra=extra)
    log.info(
        "Asset event for %s (%d written) through %s", asset.uri, written(summary), [a.name for a in aliases]
    )
    return True
