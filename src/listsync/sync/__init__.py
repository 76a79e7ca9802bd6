"""The List syncs: diff an extract against a List, write only the changes, read them back and
remember what was applied. :mod:`~listsync.sync.job` is the skeleton both follow,
:mod:`~listsync.sync.steps` the steps they share; :mod:`~listsync.sync.people` and
:mod:`~listsync.sync.rows` are the two syncs, :class:`~listsync.sync.settings.SyncSettings` the
settings they share, :mod:`~listsync.sync.summary` what they return::

    from listsync.extract import Rejects, read_extract
    from listsync.sync import SyncSettings, prepare_people, sync_people

    with Rejects("rejects.jsonl") as rejects:
        # arrow_text: the CSV's text as Arrow strings, which the people preparation takes as it is
        prepared = prepare_people(read_extract("people.csv", arrow_text=True), column_map, rejects=rejects)

    sync_people(client, table_id, read_extract("people.csv", arrow_text=True), column_map,
                mode="mirror", settings=SyncSettings(dry_run=True, plan_path="plan.jsonl"))

The names below load their module on first use (PEP 562): importing the package, or a light
submodule such as :mod:`listsync.sync.settings` (the settings an operator checks when its DAG is
parsed), does not import pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from listsync.lazy import lazy_names

if TYPE_CHECKING:
    from listsync.sync.people.prepare import PreparedPeople, prepare_people
    from listsync.sync.people.sync import sync_people
    from listsync.sync.rows.prepare import PreparedRows, prepare_rows
    from listsync.sync.rows.upsert import upsert_rows
    from listsync.sync.settings import SyncSettings
    from listsync.sync.summary import ListSyncSummary, PeopleSummary, RowsSummary

__all__ = [
    "ListSyncSummary",
    "PeopleSummary",
    "PreparedPeople",
    "PreparedRows",
    "RowsSummary",
    "SyncSettings",
    "prepare_people",
    "prepare_rows",
    "sync_people",
    "upsert_rows",
]

_MODULES = {
    "PreparedPeople": "listsync.sync.people.prepare",
    "prepare_people": "listsync.sync.people.prepare",
    "sync_people": "listsync.sync.people.sync",
    "PreparedRows": "listsync.sync.rows.prepare",
    "prepare_rows": "listsync.sync.rows.prepare",
    "upsert_rows": "listsync.sync.rows.upsert",
    "SyncSettings": "listsync.sync.settings",
    "ListSyncSummary": "listsync.sync.summary",
    "PeopleSummary": "listsync.sync.summary",
    "RowsSummary": "listsync.sync.summary",
}


__getattr__, __dir__ = lazy_names(__name__, _MODULES, __all__)
