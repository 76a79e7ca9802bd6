"""Another writer of a List, for the ``busy`` profile (the profile's ``other_writer_share``).

A List that people use changes while a sync reads it. This writer plays them: while a paged read
of a List is between pages (a page was served and more are to come), it deletes, adds and edits
``other_writer_share`` of what is being read, each: people on a people read, rows on a rows read.
It moves a List at most once every ``other_writer_every`` seconds, so that a sync reading the List
again soon after finds it steady. Its changes are another user's writes: they go through
:meth:`~listsync.emulator.lists.ListOperations.write`, so a lagging profile shows them late too.
"""

from __future__ import annotations

import copy
import random
from typing import Any, Literal

from listsync.emulator.lists import ListOperations
from listsync.emulator.store import ListState, Row
from listsync.emulator.windows import iso_utc

#: The value the other writer puts in a title or a text cell it edits.
EDITED = "Edited elsewhere"


class OtherWriter:
    """Moves a List between the pages of a read (see the module docstring); ``seed`` makes its
    choices the same for the same requests."""

    def __init__(self, lists: ListOperations, seed: int | None) -> None:
        self._lists = lists
        self._share = lists.dialect.other_writer_share
        self._every = lists.dialect.other_writer_every
        self._seed = seed
        self.reset()

    def reset(self) -> None:
        """As when the emulator started: no List moved yet, the seed's first choices next."""
        self._rng = random.Random(self._seed)
        self._last: dict[str, float] = {}
        self._made = 0
        #: What each move did, for inspection: the List, the time and what was read, and copies of
        #: the people (with their ``accountDomain``) or rows' cells it ``deleted``, ``added`` and
        #: ``edited`` (as they were before the edit).
        self.moves: list[dict[str, Any]] = []

    def between_pages(self, lst: ListState, what: Literal["people", "rows"]) -> None:
        """A page of ``what`` of ``lst`` was served and more are to come: move the List, unless the
        profile has no other writer or it moved this List less than ``other_writer_every`` ago."""
        if not self._share:
            return
        now = self._lists.clock()
        last = self._last.get(lst.id)
        if last is not None and now - last < self._every:
            return
        self._last[lst.id] = now
        move = self._move_people if what == "people" else self._move_rows
        self._lists.write(lst, lambda target, _body: move(target), {})

    def _count(self, size: int) -> int:
        return max(1, round(self._share * size)) if size else 0

    def _move_people(self, lst: ListState) -> dict[str, Any]:
        pairs = [(row, person) for row in lst.rows.values() for person in row.people]
        count = self._count(len(pairs))
        chosen = self._rng.sample(pairs, min(len(pairs), 2 * count))
        move = self._move(lst, "people")

        def shown(row: Row, person: dict[str, Any]) -> dict[str, Any]:
            return {**copy.deepcopy(person), "accountDomain": lst.account_domain(row)}

        for row, person in chosen[count:]:
            move["edited"].append(shown(row, person))
            person["title"] = EDITED
        for row, person in chosen[:count]:
            move["deleted"].append(shown(row, person))
            row.people[:] = [kept for kept in row.people if kept is not person]
        accounts = [row for row in lst.rows.values() if lst.account_domain(row)]
        for row in self._rng.sample(accounts, min(len(accounts), count)):
            self._made += 1
            person = {
                "first_name": "Other",
                "last_name": f"Writer{self._made}",
                "email": f"other.writer{self._made}@{lst.account_domain(row)}",
                "target": True,
            }
            row.people.append(person)
            move["added"].append(shown(row, person))
        lst.people_changed()
        return {}

    def _move(self, lst: ListState, what: str) -> dict[str, Any]:
        move: dict[str, Any] = {
            "list": lst.id,
            "at": self._lists.clock(),
            "what": what,
            "deleted": [],
            "added": [],
            "edited": [],
        }
        self.moves.append(move)
        return move

    def _move_rows(self, lst: ListState) -> dict[str, Any]:
        rows = list(lst.rows.values())
        count = self._count(len(rows))
        chosen = self._rng.sample(rows, min(len(rows), 2 * count))
        stamp = iso_utc(self._lists.clock())
        account = lst.config.account_column
        text = [c.id for c in lst.config.columns if c.type == "text" and c.id != account]
        move = self._move(lst, "rows")
        for row in chosen[count:]:
            if text:
                move["edited"].append(copy.deepcopy(row.cells))
                row.cells = {**row.cells, text[0]: EDITED}
                row.updated_at = stamp
        for row in chosen[:count]:
            move["deleted"].append(copy.deepcopy(row.cells))
            del lst.rows[row.id]
        column = account or (text[0] if text else None)
        for _ in range(count):
            if column is None:
                break
            self._made += 1
            row = Row(self._lists.state.new_row_id(), {column: f"other-writer-{self._made}.example"}, stamp)
            lst.rows[row.id] = row
            move["added"].append(copy.deepcopy(row.cells))
        lst.changed()
        return {}
