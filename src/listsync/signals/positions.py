"""Which of one signal's events are acknowledged, and which are in doubt, by position.

A signal's events are numbered in the caller's order; the sender keeps, per signal, the
positions acknowledged (as ranges), those in doubt (sent, fate unknown) and those acknowledged
after a send of unknown fate (possibly stored twice). :meth:`SignalPositions.to_dict` is that
signal's entry of the checkpoint (:mod:`listsync.signals.sender` describes the format).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


class SignalPositions:
    """One signal's positions: acknowledged and in doubt.

    The acknowledged positions are kept as sorted, disjoint half-open ranges: acknowledgements
    come nearly in order, so there are few ranges however many events are acknowledged, and an
    event that is never acknowledged (rejected) costs one gap, not a set entry per later event.

    :param saved: the signal's entry of a checkpoint (:meth:`to_dict`), to resume from.
    """

    def __init__(self, saved: Mapping[str, Any] | None = None) -> None:
        saved = saved or {}
        self.ranges: list[list[int]] = []
        self.add_range(0, int(saved.get("prefix", 0)))
        for start, end in saved.get("ranges", []):
            self.add_range(int(start), int(end))
        self.in_doubt: set[int] = _from_ranges(saved.get("maybe", []))
        # Acknowledged after a send whose fate was unknown: possibly stored twice.
        self.twice: set[int] = _from_ranges(saved.get("twice", []))

    def __contains__(self, position: int) -> bool:
        index = bisect.bisect_right(self.ranges, position, key=_start) - 1
        return index >= 0 and position < self.ranges[index][1]

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def add(self, position: int) -> None:
        """Mark ``position`` acknowledged."""
        if self.ranges and self.ranges[-1][1] == position:  # the usual case: the next one in order
            self.ranges[-1][1] += 1
        else:
            self.add_range(position, position + 1)

    def add_range(self, start: int, end: int) -> None:
        """Mark the positions from ``start`` to ``end`` (excluded) acknowledged."""
        if start >= end:
            return
        # The ranges that overlap or touch [start, end) are merged with it into one.
        first = bisect.bisect_left(self.ranges, start, key=_end)
        last = bisect.bisect_right(self.ranges, end, key=_start)
        if first < last:
            start = min(start, self.ranges[first][0])
            end = max(end, self.ranges[last - 1][1])
        self.ranges[first:last] = [[start, end]]

    def to_dict(self) -> dict[str, Any]:
        """The signal's entry of the checkpoint: ``prefix``, ``ranges``, and ``maybe`` and
        ``twice`` when not empty."""
        prefix = self.ranges[0][1] if self.ranges and self.ranges[0][0] == 0 else 0
        beyond = self.ranges[1:] if prefix else self.ranges
        saved: dict[str, Any] = {"prefix": prefix, "ranges": [list(pair) for pair in beyond]}
        if self.in_doubt:
            saved["maybe"] = _ranges(self.in_doubt)
        if self.twice:
            saved["twice"] = _ranges(self.twice)
        return saved


def _start(pair: list[int]) -> int:
    return pair[0]


def _end(pair: list[int]) -> int:
    return pair[1]


def _ranges(positions: Iterable[int]) -> list[list[int]]:
    """Half-open ranges covering ``positions``."""
    ranges: list[list[int]] = []
    for position in sorted(positions):
        if ranges and ranges[-1][1] == position:
            ranges[-1][1] = position + 1
        else:
            ranges.append([position, position + 1])
    return ranges


def _from_ranges(ranges: Iterable[Sequence[int]]) -> set[int]:
    return {position for start, end in ranges for position in range(int(start), int(end))}
