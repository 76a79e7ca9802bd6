"""A local, faithful implementation of the Signal Ingestion and List Write service.

For the demo, tests and benchmarks::

    from listsync.emulator import demo_config, serve_in_thread

    with serve_in_thread(demo_config()) as base_url:
        ...  # point a client at base_url with key sk_demo_listsync

``create_app(config)`` gives the ASGI app itself (its handle is ``app.state.emulator``); the
``listsync emulator`` command serves one from the command line. Decisions where the spec is
silent are those of ``docs/assumptions.md``; ``EmulatorConfig(profile=...)`` picks another reading
of them, one of :data:`PROFILES` (see :mod:`listsync.emulator.profiles`).
"""

from listsync.emulator.app import Emulator, create_app
from listsync.emulator.config import (
    EmulatorConfig,
    FaultRule,
    ListConfig,
    SignalConfig,
    demo_config,
    load_config,
)
from listsync.emulator.faults import ConnectionDropped
from listsync.emulator.profiles import PROFILES, Dialect
from listsync.emulator.server import serve_in_thread

__all__ = [
    "PROFILES",
    "ConnectionDropped",
    "Dialect",
    "Emulator",
    "EmulatorConfig",
    "FaultRule",
    "ListConfig",
    "SignalConfig",
    "create_app",
    "demo_config",
    "load_config",
    "serve_in_thread",
]
