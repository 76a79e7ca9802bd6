"""What a List sync last applied, kept from one run to the next: the state of a three-way diff.

A hosted service may show a write seconds after acknowledging it, and keep values in a form of its
own (:mod:`listsync.sync.forms`). A sync that diffs the extract against the live List alone then
sees every such value as a change, every late write as missing, and writes them again, night after
night. Like ``kubectl apply``'s last-applied configuration and Terraform's state, a sync keeps,
for every person or row it wrote or found in step, one entry:

- ``key``: a 64-bit hash of the item as the extract names it (account domain and identity, or the
  row key);
- ``sent``: a digest of the extract's normalised values last applied;
- ``seen``: a digest of the values the List showed for the item afterwards (:data:`UNSEEN` when
  the List has not shown the write yet);
- ``since`` and ``kind``: when a write the List has not shown yet was acknowledged, and which
  (:data:`ADD`, :data:`PATCH`, :data:`DELETE`; 0 once shown);

and the forms the service keeps each field in, learned from read backs. The next run diffs three
ways: an item whose extract values are the ones sent and whose List values are the ones seen is
unchanged, whatever form the List keeps them in; an extract that changed is written; a List that
changed under an unchanged extract was edited by hand, and is repaired and counted
(``edited_in_list``). A write not yet shown is not repeated while it is younger than the
visibility window.

A state is refused when it was made for another List, shard or mapping (:class:`StateMismatchError`);
without one (the first run, a lost state, ``fresh_state``) the sync diffs against the live List
alone. Its size is 29 bytes an item (28 MiB at 1,000,000 people), read back without a copy.

The modules: :mod:`~listsync.sync.state.format` (the scope, the entries as columns, the file
format), :mod:`~listsync.sync.state.rules` (:class:`LastApplied`, the three-way decisions),
:mod:`~listsync.sync.state.ledger` (:class:`Ledger`, what a plan keeps for the next state) and
:mod:`~listsync.sync.state.stores` (where a state is kept, loading and saving it).
"""

from listsync.sync.state.format import (
    ADD,
    DELETE,
    PATCH,
    STATE_FORMAT,
    UNSEEN,
    StateEntries,
    StateMismatchError,
    StateScope,
    SyncState,
)
from listsync.sync.state.ledger import Ledger
from listsync.sync.state.rules import WEIGHED_AT_ONCE, Digests, LastApplied
from listsync.sync.state.stores import (
    FileStateStore,
    StateDirectory,
    StateStore,
    load_state,
    save_state,
    state_files,
    state_store,
)

__all__ = [
    "ADD",
    "DELETE",
    "PATCH",
    "STATE_FORMAT",
    "UNSEEN",
    "WEIGHED_AT_ONCE",
    "Digests",
    "FileStateStore",
    "LastApplied",
    "Ledger",
    "StateDirectory",
    "StateEntries",
    "StateMismatchError",
    "StateScope",
    "StateStore",
    "SyncState",
    "load_state",
    "save_state",
    "state_files",
    "state_store",
]
