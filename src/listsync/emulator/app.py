"""The emulator's HTTP surface: the ``/v1`` API of the spec plus inspection under ``/_emulator``.

``create_app(config)`` returns a FastAPI app; its :class:`Emulator` handle (state, counters,
faults, clock) is ``app.state.emulator``, for tests that inspect or steer it in-process. The
config's profile (:mod:`listsync.emulator.profiles`) decides the unknowns of the spec.

Inspection (no auth; the prefix cannot collide with ``/v1``):

- ``GET /_emulator/state``: Lists (rows with cells and their people) and ingested events;
- ``GET /_emulator/stats``: requests and statuses per endpoint, events accepted/limited per signal;
- ``POST /_emulator/reset``: empty Lists, no events, fresh rate windows and counters, faults as configured;
- ``GET|POST|DELETE /_emulator/faults``: list, add (``{"rules": [FaultRule, ...]}``) or clear faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import TypeAdapter, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Message, Receive, Scope, Send

from listsync.emulator.answers import people_page_body, write_body
from listsync.emulator.config import ENDPOINTS, EmulatorConfig, FaultRule
from listsync.emulator.faults import FaultInjector, drop_connection
from listsync.emulator.ingestion import SignalIngestion
from listsync.emulator.lists import ListOperations
from listsync.emulator.other_writer import OtherWriter
from listsync.emulator.people_endpoints import PeopleEndpoints
from listsync.emulator.rows_endpoints import RowsEndpoints
from listsync.emulator.stats import Stats
from listsync.emulator.store import ApiError, EmulatorState, ListState
from listsync.emulator.windows import LIMITERS, reset_header

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
Handler = Callable[[Request], Awaitable[Response]]

PUBLIC_KEY_REFUSED = "Public keys may only call POST /v1/events and POST /v1/events/batch"
INJECTED_ERRORS = {500: "Internal server error", 502: "Bad gateway", 503: "Service unavailable"}
_FAULT_RULES = TypeAdapter(list[FaultRule])


def _endpoint_pattern(endpoint: str) -> tuple[str, re.Pattern[str]]:
    method, template = endpoint.split(" ", 1)
    return method, re.compile(re.sub(r"\\\{tableId\\\}", "[^/]+", re.escape(template)))


_ENDPOINT_PATTERNS = [(name, *_endpoint_pattern(name)) for name in ENDPOINTS]


def endpoint_name(method: str, path: str) -> str | None:
    """The name (``"POST /v1/lists/{tableId}/rows"``) of an API request, or None."""
    for name, wanted_method, pattern in _ENDPOINT_PATTERNS:
        if method == wanted_method and pattern.fullmatch(path):
            return name
    return None


def json_response(status: int, payload: object, headers: Mapping[str, str] | None = None) -> Response:
    # json.dumps directly: FastAPI's encoder walks every value and is the bottleneck on big pages.
    body = json.dumps(payload, separators=(",", ":"))
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    return json_response(status, {"success": False, "error": message}, headers)


class Emulator:
    """One emulator's state and machinery, shared by its routes and open to tests."""

    def __init__(self, config: EmulatorConfig, clock: Clock, sleep: Sleep) -> None:
        self.config = config
        self.dialect = config.dialect
        self.clock = clock
        self.sleep = sleep
        self.state = EmulatorState(config)
        if config.state_file and Path(config.state_file).exists():
            self.state.load(config.state_file)
        self.stats = Stats()
        self.limiter = LIMITERS[self.dialect.windows](config.window_seconds, clock)
        self.faults = FaultInjector(config.faults.rules, config.seed)
        rng = random.Random(config.seed)
        self.signals = SignalIngestion(config, self.state, self.limiter, self.stats, rng)
        self.lists = ListOperations(config, self.state, clock)
        self.people = PeopleEndpoints(self.lists)
        self.rows = RowsEndpoints(self.lists)
        self.other_writer = OtherWriter(self.lists, config.seed)
        self._secret_keys = frozenset(config.secret_keys)
        self._public_keys = frozenset(config.public_keys)

    def reset(self) -> None:
        """Empty Lists, no events, fresh windows and counters, faults as configured."""
        self.state.clear()
        self.limiter.reset()
        self.stats.clear()
        self.faults.reset(self.config.faults.rules)
        self.other_writer.reset()
        self.persist()

    def persist(self) -> None:
        if self.config.state_file:
            self.state.save(self.config.state_file)

    def authorize(self, request: Request, *, public_allowed: bool) -> None:
        """Bearer auth (A2, A3): secret keys everywhere, public keys only on event ingestion.

        A missing key is a 401 in every profile; the status of an invalid one is the profile's.
        """
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise ApiError(401, "Missing API key")
        if key in self._secret_keys:
            return
        if key in self._public_keys:
            if public_allowed:
                return
            raise ApiError(403, PUBLIC_KEY_REFUSED)
        raise ApiError(self.dialect.invalid_key_status, "Invalid API key")

    def forced_fault_response(self, endpoint: str, fault: FaultRule) -> Response:
        """The answer of an ``error`` or ``rate_limit`` fault."""
        if fault.kind == "error":
            return error_response(fault.status, INJECTED_ERRORS[fault.status])
        message = "Rate limit exceeded"
        if endpoint == "POST /v1/events/batch":
            message = "Rate limit exceeded for all events in batch"
        headers = {
            "Retry-After": str(fault.retry_after_seconds),
            "X-RateLimit-Reset": reset_header(
                self.clock() + fault.retry_after_seconds, self.dialect.reset_format
            ),
        }
        return error_response(429, message, headers)


class EmulatorApp(FastAPI):
    """FastAPI with faults and counters applied around each ``/v1`` request.

    This wraps ``__call__`` rather than using middleware because only here is ``send`` the
    server's own, which a dropped-connection fault needs in order to reach the socket.
    """

    emulator: Emulator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = endpoint_name(scope["method"], scope["path"]) if scope["type"] == "http" else None
        if endpoint is None:
            await super().__call__(scope, receive, send)
            return
        emulator = self.emulator
        decision = emulator.faults.decide(endpoint)
        if decision.latency_seconds:
            # The request is read before the wait and applied after it, whether or not its client
            # is still there: a late write lands, as it would on a slow service.
            receive = _replaying(await _body(receive))
            send = _tolerating_a_gone_client(send)
            await emulator.sleep(decision.latency_seconds)
        fault = decision.fault
        if fault is not None and fault.kind in ("drop_before", "drop_after"):
            if fault.kind == "drop_after":
                await super().__call__(scope, receive, _discard)
            else:
                # Read the body first: closing with request bytes unread makes the kernel reset
                # the connection, and the client would see a read error, not a disconnect.
                await _drain(receive)
            emulator.stats.record(endpoint, "dropped")
            await drop_connection(send)
            return
        if fault is not None:
            response = emulator.forced_fault_response(endpoint, fault)
            emulator.stats.record(endpoint, response.status_code)
            await response(scope, receive, send)
            return
        status = 500

        async def counting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await super().__call__(scope, receive, counting_send)
        finally:
            emulator.stats.record(endpoint, status)


async def _discard(message: Message) -> None:
    """The ``send`` of a request whose answer is lost (``drop_after``)."""


async def _drain(receive: Receive) -> None:
    """Read and drop the request body (``drop_before``)."""
    await _body(receive)


async def _body(receive: Receive) -> bytes:
    """The whole request body."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body", False):
            return b"".join(chunks)


def _replaying(body: bytes) -> Receive:
    """A ``receive`` that gives ``body`` once, then waits as for a client that says nothing more."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # never set: nothing more comes
        return {"type": "http.disconnect"}

    return receive


def _tolerating_a_gone_client(send: Send) -> Send:
    """A ``send`` that drops the answer when its client has gone (it gave up waiting)."""

    async def tolerant(message: Message) -> None:
        with contextlib.suppress(OSError):
            await send(message)

    return tolerant


def _refuse_constant(name: str) -> Any:
    # Python's json reads NaN and Infinity, which JSON does not allow and the service would refuse.
    raise ValueError(f"{name} is not JSON")


async def _json_body(request: Request) -> Any:
    try:
        return json.loads(await request.body(), parse_constant=_refuse_constant)
    except ValueError:
        raise ApiError(400, "Invalid JSON body") from None


async def _object_body(request: Request) -> dict[str, Any]:
    body = await _json_body(request)
    if not isinstance(body, dict):
        raise ApiError(400, "Invalid JSON body")
    return body


def create_app(
    config: EmulatorConfig,
    *,
    clock: Clock = time.time,
    sleep: Sleep = asyncio.sleep,
) -> FastAPI:
    """The emulator app for ``config``.

    :param clock: epoch seconds; rate windows and timestamps use it, so a test can move time.
    :param sleep: awaited for injected latency; a test can record instead of waiting.
    """
    app = EmulatorApp(title="listsync emulator", openapi_url=None, docs_url=None, redoc_url=None)
    emulator = Emulator(config, clock, sleep)
    app.emulator = emulator
    app.state.emulator = emulator

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Response:
        return error_response(exc.status, exc.message, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return error_response(exc.status_code, str(exc.detail), exc.headers)

    def route(method: str, path: str) -> Callable[[Handler], Handler]:
        """Register a plain Starlette route: the handlers read the request themselves, so
        FastAPI's per-request dependency solving (a measurable share of a small request) is skipped."""

        def register(handler: Handler) -> Handler:
            app.add_route(path, handler, methods=[method])
            return handler

        return register

    # ---- signal ingestion --------------------------------------------------------------------

    @route("POST", "/v1/events")
    async def ingest_event(request: Request) -> Response:
        emulator.authorize(request, public_allowed=True)
        result = emulator.signals.ingest_one(await _json_body(request))
        emulator.persist()
        return json_response(emulator.dialect.single_ingest_status, result.body, result.headers)

    @route("POST", "/v1/events/batch")
    async def ingest_batch(request: Request) -> Response:
        emulator.authorize(request, public_allowed=True)
        result = emulator.signals.ingest_batch(await _json_body(request))
        emulator.persist()
        return json_response(200, result.body, result.headers)

    # ---- Lists -------------------------------------------------------------------------------

    ops = emulator.lists

    def ok(data: object) -> Response:
        return json_response(200, {"success": True, "data": data})

    def read_request(request: Request) -> dict[str, str]:
        emulator.authorize(request, public_allowed=False)
        params = dict(request.query_params)
        ops.check_user(params.get("userId"))
        return params

    def table(request: Request) -> ListState:
        return ops.table(request.path_params["table_id"])

    @route("GET", "/v1/lists")
    async def list_lists(request: Request) -> Response:
        read_request(request)
        return ok(ops.list_lists())

    @route("GET", "/v1/lists/{table_id}")
    async def get_list(request: Request) -> Response:
        read_request(request)
        return ok(ops.describe(table(request)))

    @route("GET", "/v1/lists/{table_id}/targetable-people")
    async def query_people(request: Request) -> Response:
        params = read_request(request)
        lst = table(request)
        page = emulator.people.query_people(lst, params)
        if not {"target", "personas", *emulator.dialect.filter_names.values()} & set(params):
            emulator.stats.unfiltered_pages[f"people of {lst.id}"] += 1
        if page["hasMore"]:
            emulator.other_writer.between_pages(lst, "people")
        return json_response(200, people_page_body(page, emulator.dialect))

    @route("GET", "/v1/lists/{table_id}/rows")
    async def get_rows(request: Request) -> Response:
        params = read_request(request)
        lst = table(request)
        page = emulator.rows.get_rows(lst, params)
        if page["truncated"]:
            emulator.other_writer.between_pages(lst, "rows")
        return ok(page)

    def register_write(
        method: str, path: str, operation: Callable[[ListState, dict[str, Any]], Mapping[str, Any]]
    ) -> None:
        @route(method, path)
        async def write(request: Request) -> Response:
            emulator.authorize(request, public_allowed=False)
            body = await _object_body(request)
            # A9: DELETE may carry userId in the body or in the query string.
            ops.check_user(body.get("userId", request.query_params.get("userId")))
            result = ops.write(table(request), operation, body)
            emulator.persist()
            return json_response(200, write_body(result, emulator.dialect))

    people_path = "/v1/lists/{table_id}/targetable-people"
    register_write("POST", people_path, emulator.people.add_people)
    register_write("PATCH", people_path, emulator.people.update_people)
    register_write("DELETE", people_path, emulator.people.delete_people)
    register_write("POST", "/v1/lists/{table_id}/rows", emulator.rows.add_rows)
    register_write("PATCH", "/v1/lists/{table_id}/cells", emulator.rows.update_cells)
    register_write("DELETE", "/v1/lists/{table_id}/rows", emulator.rows.delete_rows)

    # ---- inspection --------------------------------------------------------------------------

    @route("GET", "/_emulator/state")
    async def inspect_state(request: Request) -> Response:
        return json_response(200, emulator.state.snapshot())

    @route("GET", "/_emulator/stats")
    async def inspect_stats(request: Request) -> Response:
        return json_response(200, emulator.stats.snapshot())

    @route("POST", "/_emulator/reset")
    async def reset(request: Request) -> Response:
        emulator.reset()
        return json_response(200, {"success": True})

    @route("GET", "/_emulator/faults")
    async def list_faults(request: Request) -> Response:
        return json_response(200, {"rules": emulator.faults.snapshot()})

    @route("POST", "/_emulator/faults")
    async def add_faults(request: Request) -> Response:
        body = await _object_body(request)
        try:
            rules = _FAULT_RULES.validate_python(body.get("rules"))
        except ValidationError as exc:
            raise ApiError(400, f"Invalid fault rules: {exc.errors(include_url=False)}") from None
        emulator.faults.add(rules)
        return json_response(200, {"rules": emulator.faults.snapshot()})

    @route("DELETE", "/_emulator/faults")
    async def clear_faults(request: Request) -> Response:
        emulator.faults.clear()
        return json_response(200, {"rules": []})

    return app
