"""The emulator served on a real socket for a test: :func:`serve_emulator` and :class:`LiveEmulator`.

Every test that needs the emulator over HTTP starts it here, through the ``live_emulator`` fixture
(:mod:`tests.support.plugin`) or, for a fixture wider than one test, :func:`serve_emulator` itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI

from listsync.client import ListSyncClient
from listsync.emulator import PROFILES, EmulatorConfig, FaultRule, create_app, demo_config, serve_in_thread

from .clock import FakeClock

#: The profiles on which a List changes only by the test's own writes, sorted: the readings of the
#: spec whose outcomes a test can state exactly (``busy`` has another writer of its Lists).
SOLE_WRITER_PROFILES = sorted(name for name, dialect in PROFILES.items() if not dialect.other_writer_share)


class LiveEmulator:
    """A served emulator: its ``url``, its ``config``, and in-process, what it holds (``state``),
    the requests it answered (``stats``), the faults it injects (``faults.add``/``faults.clear``) and
    what the ``busy`` profile's other writer did (``other_writer.moves``).
    """

    def __init__(self, url: str, app: FastAPI, clock: FakeClock | None) -> None:
        self.url = url
        self._emulator = app.state.emulator
        self.config: EmulatorConfig = self._emulator.config
        self.state = self._emulator.state
        self.stats = self._emulator.stats
        self.faults = self._emulator.faults
        self.other_writer = self._emulator.other_writer
        self._clock = clock
        self._clients: list[ListSyncClient] = []

    def reset(self) -> None:
        """Empty Lists, no events, fresh rate windows and counters, faults as configured."""
        self._emulator.reset()

    def client(self, *, api_key: str | None = None, **options: Any) -> ListSyncClient:
        """A client of this emulator with the config's first user and ``api_key`` (its first secret
        key by default), closed when the emulator stops; on a fake clock it sleeps on that clock,
        without jitter."""
        if self._clock is not None:
            options = {"clock": self._clock, "sleep": self._clock.sleep, "rand": lambda: 0.0, **options}
        user = self.config.users[0] if self.config.users else None
        made = ListSyncClient(self.url, api_key or self.config.secret_keys[0], user, **options)
        self._clients.append(made)
        return made

    def seed(self, table: str, *cells: Mapping[str, Any]) -> list[str]:
        """Add rows of these cells to ``table``, then clear the counters, so that a test sees only its
        own requests; returns the new row ids."""
        with self.client() as client:
            added = client.add_rows(table, [{"cells": dict(row)} for row in cells])
        self.stats.clear()
        return added.row_ids

    def rows(self, table: str) -> list[dict[str, Any]]:
        """The cells of each row of ``table``, in insertion order."""
        return [dict(row.cells) for row in self.state.lists[table].rows.values()]

    def requests(self, *endpoints: str) -> dict[str, int]:
        """Requests answered on each endpoint (``"POST /v1/lists/{tableId}/rows"``) since the
        counters were last cleared."""
        return {endpoint: self.stats.requests[endpoint] for endpoint in endpoints}

    def _close_clients(self) -> None:
        for made in self._clients:
            made.close()


@contextmanager
def serve_emulator(
    config: EmulatorConfig | None = None,
    *,
    clock: FakeClock | None,
    faults: Iterable[FaultRule | Mapping[str, Any]] = (),
    sleep: Callable[[float], Awaitable[None]] | None = None,
    port: int = 0,
    **settings: Any,
) -> Iterator[LiveEmulator]:
    """Serve a fresh emulator until the block ends.

    :param config: the tenant; the demo's (``demo_config()``) by default.
    :param clock: the emulator's time and the sleep of its injected latency; ``None`` for the wall
        clock, for a server that clients on real time use (a subprocess, an Airflow task).
    :param faults: fault rules added to the config's, kept by a reset.
    :param sleep: awaited for injected latency instead of the clock's sleep.
    :param port: 0 picks a free port.
    :param settings: config fields to replace, e.g. ``profile="hosted"``, ``window_seconds=2``.
    """
    data = (config or demo_config()).model_dump()
    data.update(settings)
    data["faults"]["rules"] += [FaultRule.model_validate(rule).model_dump() for rule in faults]
    app = create_app(
        EmulatorConfig.model_validate(data),
        clock=clock.time if clock is not None else time.time,
        sleep=sleep or (clock.async_sleep if clock is not None else asyncio.sleep),
    )
    with serve_in_thread(app, port=port) as url:
        live = LiveEmulator(url, app, clock)
        try:
            yield live
        finally:
            live._close_clients()
