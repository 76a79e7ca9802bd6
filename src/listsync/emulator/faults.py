"""Fault injection: server errors, latency, dropped connections and forced 429s, off by default.

Rules come from the config and can be added or cleared at runtime (``POST``/``DELETE
/_emulator/faults``, or :meth:`FaultInjector.add` in-process). Probabilistic rules draw from one
random generator seeded by ``EmulatorConfig.seed``, so a seeded run fails the same way each time;
a rule with ``times`` fires on exactly the next N matching requests.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from listsync.emulator.config import FaultRule


class ConnectionDropped(httpx.RemoteProtocolError):
    """Raised to an in-process caller (``httpx.ASGITransport``, Starlette's ``TestClient``) where
    a socket server would have closed the connection: the caller sees the same
    ``httpx.RemoteProtocolError`` it would get from a live server."""

    def __init__(self) -> None:
        super().__init__("Server disconnected without sending a response (injected fault).")


@dataclass(frozen=True)
class FaultDecision:
    """What to do to one request: delay it, then answer or drop it per ``fault`` (if any)."""

    latency_seconds: float = 0.0
    fault: FaultRule | None = None


class FaultInjector:
    """Decides, per request, which configured faults fire."""

    def __init__(self, rules: Iterable[FaultRule], seed: int | None) -> None:
        self._seed = seed
        self._rng = random.Random(seed)
        # Each rule with the number of firings it has left (None: unlimited, by probability).
        self._rules: list[tuple[FaultRule, int | None]] = []
        # Tests arm faults from their own thread while the server thread consumes them.
        self._lock = threading.Lock()
        self.add(rules)

    def add(self, rules: Iterable[FaultRule]) -> None:
        with self._lock:
            self._rules.extend((rule, rule.times) for rule in rules)

    def clear(self) -> None:
        with self._lock:
            self._rules = []

    def reset(self, rules: Iterable[FaultRule]) -> None:
        """Back to ``rules`` and to the seed's first draw."""
        self.clear()
        with self._lock:
            self._rng = random.Random(self._seed)
        self.add(rules)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{**rule.model_dump(), "remaining": left} for rule, left in self._rules]

    def decide(self, endpoint: str) -> FaultDecision:
        with self._lock:
            return self._decide(endpoint)

    def _decide(self, endpoint: str) -> FaultDecision:
        latency = 0.0
        fault: FaultRule | None = None
        kept: list[tuple[FaultRule, int | None]] = []
        for rule, left in self._rules:
            applies = rule.endpoint in ("*", endpoint) and (fault is None or rule.kind == "latency")
            remaining = left
            if applies and remaining is not None:
                remaining -= 1
                fires = True
            else:
                fires = applies and self._rng.random() < rule.probability
            if fires:
                if rule.kind == "latency":
                    latency += rule.latency_seconds
                else:
                    fault = rule
            if remaining is None or remaining > 0:
                kept.append((rule, remaining))
        self._rules = kept
        return FaultDecision(latency, fault)


async def drop_connection(send: Any) -> None:
    """Close the client's connection without answering.

    Under uvicorn the ASGI ``send`` is a method of the request cycle that owns the socket
    transport: closing that transport is what a crashed or cut-off server looks like to the
    client. In-process transports have no socket, so :class:`ConnectionDropped` is raised instead.
    """
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    # Duck-typed: uvloop's transports do not subclass asyncio.BaseTransport.
    close = getattr(transport, "close", None)
    if not callable(close):
        raise ConnectionDropped()
    close()
    # One turn of the loop delivers connection_lost to uvicorn first, so it marks the cycle
    # disconnected instead of logging a missing response and trying to send a 500.
    await asyncio.sleep(0)
