"""The targetable-people sync: diff an extract against a List, then write only the changes.

The flow, which :func:`sync_people` runs end to end in the order every List sync follows
(:mod:`listsync.sync.job`), one module a step (:mod:`~listsync.sync.people.diff`, which plans
by :mod:`~listsync.sync.people.match`'s matching into a :mod:`~listsync.sync.people.plan`;
:mod:`~listsync.sync.people.apply`, :mod:`~listsync.sync.people.read` and
:mod:`~listsync.sync.people.verify`, run by :mod:`~listsync.sync.people.sync`)::

    people = prepare_people(frames, column_map, rejects)        # normalised, validated, deduplicated
    plan = plan_people_sync(people, client.iter_targetable_people(table_id), mode=...)
    write_json_lines(plan.entries(), plan_path)                 # what will happen, for review
    check_delete_safety(...)                                    # a broken extract never wipes a List
    result = apply_people_plan(plan, client, table_id=...)      # chunked adds, patches, deletes

**Identity.** A person is keyed by account domain + :func:`~listsync.client.models.person_identity`
(e-mail when present, else profile URL, then phone, then first and last name: the order the
service uses for deletes). The List side is normalised the same way as the extract (domains as
bare hosts, e-mails lower-cased, profile URLs canonical), so a List written by other tools still
matches. An extract person whose e-mail or profile URL matches a List person of the same account
is that person even when their primary identities differ (the List copy lacks the e-mail, say):
the service merges such people on add (A16), so planning them as add + delete would be wrong.

**The plan.** Adds: extract people not in the List. Patches: only the fields that differ, found
by the List person's own identity (``match``, A17). A ``None`` in the extract leaves the List's
value alone unless ``overwrite_with_null``; a field the extract does not carry (an unmapped
column) is never touched. Deletes, only with ``mode="mirror"``: List people not in the extract,
within the accounts the extract names (``delete_scope="accounts_in_source"``) or in the whole
List (``"list"``). List people without any identity, and List people of one account sharing an
e-mail, profile URL or identity, are counted and left alone: a write by that key could not tell
them apart.
"""

from listsync.sync.people.apply import PeopleApplyResult, apply_people_plan, chunk_sizes
from listsync.sync.people.diff import plan_people_sync
from listsync.sync.people.plan import PeoplePlan, PlannedAdd, PlannedDelete, PlannedPatch, PlannedWrites
from listsync.sync.people.sync import sync_people
from listsync.sync.people.verify import PeopleVerification, verify_people
from listsync.sync.settings import DeleteScope, SyncMode, check_sync_options

__all__ = [
    "DeleteScope",
    "PeopleApplyResult",
    "PeoplePlan",
    "PeopleVerification",
    "PlannedAdd",
    "PlannedDelete",
    "PlannedPatch",
    "PlannedWrites",
    "SyncMode",
    "apply_people_plan",
    "check_sync_options",
    "chunk_sizes",
    "plan_people_sync",
    "sync_people",
    "verify_people",
]
