"""An emulator loaded by a benchmark script and served from a child process of it.

The child runs the same script with ``--serve-emulator``: it builds its List state in memory,
prints the base URL and serves until its standard input closes. Serving from another process
keeps the emulator's work off the measured process's GIL.

Also what the whole-job benchmarks (``people_job.py``, ``rows_upsert.py --job``) share: the
emulator's request count and latency fault, and the figures of one night's job, run in a process
of its own (:func:`night_figures`).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType, TracebackType
from typing import Any

import httpx
from rss import peak_rss_mib

SERVE_FLAG = "--serve-emulator"


def serve_until_stdin_closes(app: Any) -> None:
    """In the child: serve ``app``, print its base URL, return when standard input closes."""
    from listsync.emulator import serve_in_thread

    with serve_in_thread(app) as url:
        print(url, flush=True)
        sys.stdin.read()


class ChildEmulator:
    """``with ChildEmulator(__file__) as url:`` a fresh emulator, served by ``script`` in a child;
    ``args`` are passed on to the child's command line."""

    def __init__(self, script: str, *args: str) -> None:
        self.script = script
        self.args = args

    def __enter__(self) -> str:
        self.child = subprocess.Popen(
            [sys.executable, self.script, SERVE_FLAG, *self.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.child.stdout is not None
        return self.child.stdout.readline().strip()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self.child.stdin is not None
        self.child.stdin.close()
        self.child.wait(timeout=60)


def requests_by_kind(url: str, endpoints: Mapping[str, str]) -> dict[str, int]:
    """Requests the emulator at ``url`` received, per kind (kind -> endpoint name of its stats)."""
    stats = httpx.get(f"{url}/_emulator/stats").json()["endpoints"]
    return {kind: stats.get(endpoint, {}).get("requests", 0) for kind, endpoint in endpoints.items()}


def all_requests(url: str) -> int:
    """Every ``/v1`` request the emulator at ``url`` received so far."""
    stats = httpx.get(f"{url}/_emulator/stats").json()["endpoints"]
    return sum(int(endpoint["requests"]) for endpoint in stats.values())


def add_latency(url: str, seconds: float) -> None:
    """Make the emulator at ``url`` add ``seconds`` to every ``/v1`` request (none for 0)."""
    if seconds > 0:
        rules = [{"endpoint": "*", "kind": "latency", "latency_seconds": seconds}]
        httpx.post(f"{url}/_emulator/faults", json={"rules": rules}).raise_for_status()


# -- one night's job, in a process of its own ---------------------------------------------------


def record_memory_guards() -> list[Any]:
    """The memory guards the job makes from now on, kept to read their estimate of the peak."""
    from listsync.sync import job
    from listsync.sync.memory import MemoryGuard

    made: list[MemoryGuard] = []

    class Recorded(MemoryGuard):
        def __init__(self, *args: Any, **options: Any) -> None:
            super().__init__(*args, **options)
            made.append(self)

    job.MemoryGuard = Recorded  # type: ignore[misc]
    return made


def timing_steps(
    module: ModuleType,
    names: Mapping[str, str],
    seconds: dict[str, float],
    peaks: dict[str, float],
    cpu: dict[str, float],
    spans: list[tuple[str, float, float, float, float]],
) -> None:
    """Time the steps a job calls (``names``: function name in ``module`` -> step), and take the
    process's peak RSS at the end of each (the step that raises it is where it is) and its CPU
    seconds (all its threads: ``cpu``), which a busy machine moves less than the wall time. Steps
    may run beside each other (the List is read while the extract is prepared): each one's
    seconds are its own, and the CPU seconds of steps side by side are those of both. Every
    call's span goes to ``spans``: its step, its start and end (``time.perf_counter``) and the
    process's CPU seconds then."""

    def timed(function: Callable[..., Any], step: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started, used = time.perf_counter(), time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                spans.append((step, started, time.perf_counter(), used, time.process_time()))
                seconds[step] = seconds.get(step, 0.0) + time.perf_counter() - started
                cpu[step] = cpu.get(step, 0.0) + time.process_time() - used
                peaks[step] = peak_rss_mib()

        return wrapper

    for name, step in names.items():
        function = getattr(module, name, None)
        if function is not None:
            setattr(module, name, timed(function, step))


def covered(spans: Iterable[tuple[float, float]]) -> float:
    """The seconds at least one of ``spans`` (start, end) covers."""
    total, reached = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reached:
            total += end - max(start, reached)
            reached = end
    return total


def night_figures(
    job: Callable[[], dict[str, Any]],
    module: ModuleType,
    names: Mapping[str, str],
    also: Mapping[ModuleType, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """In a night's process: run ``job`` (the whole job, client made to summary returned) once,
    its steps timed (:func:`timing_steps`: ``names`` in ``module``, and those of ``also``, other
    modules' functions by module); its figures: ``seconds``, peak RSS (``rss``) and the RSS
    before the job (``start_rss``), seconds, CPU seconds (``cpu``; ``cpu_seconds`` in all) and
    peak by step, the warnings ``listsync`` logged, the memory guard's ``estimate`` (MiB) and the
    ``summary``."""
    warnings: list[str] = []

    class Warnings(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage()[:300])

    logging.getLogger("listsync").addHandler(Warnings(logging.WARNING))
    guards = record_memory_guards()
    steps: dict[str, float] = {}
    peaks: dict[str, float] = {}
    cpu: dict[str, float] = {}
    spans: list[tuple[str, float, float, float, float]] = []
    for timed_module, timed_names in {module: names, **(also or {})}.items():
        timing_steps(timed_module, timed_names, steps, peaks, cpu, spans)
    start_rss = peak_rss_mib()
    started, used = time.perf_counter(), time.process_time()
    summary = job()
    seconds, used = time.perf_counter() - started, time.process_time() - used
    steps["other"] = seconds - covered((start, end) for _step, start, end, _cpu, _cpu_end in spans)
    cpu["other"] = max(0.0, used - sum(cpu.values()))
    peaks["other"] = peak_rss_mib()
    figures: dict[str, Any] = {"seconds": seconds, "rss": peaks["other"], "steps": steps, "peaks": peaks}
    figures.update(start_rss=start_rss, cpu=cpu, cpu_seconds=used)
    # Each step's calls, in seconds from the job's start: (step, start, end, CPU at start, at end).
    figures["spans"] = [
        (step, start - started, end - started, cpu_start, cpu_end)
        for step, start, end, cpu_start, cpu_end in spans
    ]
    figures["warnings"] = warnings
    figures["estimate"] = guards[-1].estimate() / 2**20
    return {**figures, "summary": summary}
