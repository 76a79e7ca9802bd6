"""The suite's one fake clock."""

from __future__ import annotations


class FakeClock:
    """Epoch seconds that move only when slept on: ``clock()`` (or ``clock.time()``) reads,
    ``clock.sleep(s)`` (``await clock.async_sleep(s)``) advances and records ``s`` in ``slept``.

    Pass the same instance as an emulator's ``clock`` and ``sleep`` (``async_sleep``: its injected
    latency is then recorded too) and a client's ``clock`` and ``sleep``, and a wait for a
    rate-limit window takes no real time.
    """

    # 2027-01-15T08:00:00Z, the start of a minute, so window ends are easy to state.
    START = 1_800_000_000.0

    def __init__(self, now: float = START) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, seconds
        self.slept.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)
