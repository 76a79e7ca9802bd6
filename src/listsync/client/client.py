"""``ListSyncClient``: the service's API in Python, one method per endpoint.

Methods are named after the API's operations (spec §4, plus GET rows and GET /v1/lists from the
public docs), take models or plain mappings (validated before sending) and return models. Every
request carries ``Authorization: Bearer <key>`` and a user agent naming this package and its
version. Retries follow :mod:`listsync.client.retry`; errors follow :mod:`listsync.client.errors`.

Responses are read tolerantly (:mod:`listsync.client.responses`). The client is the API and
nothing more: the engines built on it (the chunked writers of :mod:`listsync.client.writers`, the
paced sender of :mod:`listsync.signals.sender`) take it as a narrow interface of endpoint methods,
and it imports none of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from listsync.client.arguments import check_api_key, check_base_url, check_table_id
from listsync.client.errors import OutcomeUnknownError, TransportError, error_from_response
from listsync.client.in_flight import MAX_IN_FLIGHT, InFlightLimit
from listsync.client.models import (
    AccountDeletes,
    AccountPatches,
    AccountPeople,
    AddPeopleRequest,
    AddRowsRequest,
    BatchIngestResult,
    CellUpdate,
    DeletePeopleRequest,
    DeleteRowsRequest,
    EventAck,
    EventBatchRequest,
    ListedPerson,
    ListInfo,
    PeoplePage,
    Row,
    RowAdd,
    RowsPage,
    SignalEvent,
    UpdateCellsRequest,
    UpdatePeopleRequest,
    WireModel,
    WriteResult,
    is_merged_on_add,
    validate_event,
    validate_record,
)
from listsync.client.paging import PeopleFilters, ReadWatch, iter_offset_pages, kept_to_filters
from listsync.client.rate_hints import RateLimitInfo
from listsync.client.responses import body_of, data_of, items_of, page_of, parse, unexpected, write_result
from listsync.client.retry import Attempts, Repeat, RetryPolicy, call_with_retries

log = logging.getLogger(__name__)

# Failures that happen before the request is written: nothing reached the service.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
WireT = TypeVar("WireT", bound=WireModel)
_JSON = {"Content-Type": "application/json"}  # a request body's, made by WireModel.wire_json


def user_agent() -> str:
    """``airflow-provider-listsync/<version>``, sent with every request."""
    from listsync import __version__

    return f"airflow-provider-listsync/{__version__}"


class ListSyncClient:
    """Client of the Signal Ingestion and List Write service.

    :param base_url: the service's base address, e.g. ``https://api.example.com``.
    :param api_key: the secret key; sent as a bearer token and never shown in a repr, a log line
        or an exception.
    :param user_id: the ``userId`` sent with List requests (body of writes, query of reads).
    :param transport: an httpx transport (tests pass ``httpx.MockTransport`` or an ASGI transport).
    :param timeout: seconds per request.
    :param clock: returns epoch seconds; used for rate-limit resets and retry waits.
    :param sleep: waits a number of seconds; tests pass a fake that advances ``clock``.
    :param retry_policy: limits of retrying (:class:`RetryPolicy`).
    :param rand: source of jitter in [0, 1); inject a constant for deterministic tests.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        user_id: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        retry_policy: RetryPolicy | None = None,
        rand: Callable[[], float] | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.user_id = user_id
        self.clock = clock
        self.sleep = sleep
        self.retry_policy = retry_policy or RetryPolicy()
        self._rand = rand
        #: Unnamed filters (:data:`.paging.FILTER_NAMES`) the service was seen to ignore: applied here.
        self.filters_applied_here: set[str] = set()
        #: Per-request caps the service stated in a refusal (``Maximum <n> <things> per request``),
        #: things -> n: the chunked writers record them here and cut later requests to them.
        self.learned_caps: dict[str, int] = {}
        self.timeout = timeout
        #: When the last request attempt was sent (the client's clock): a write whose answer was
        #: lost may still land until ``timeout`` after it.
        self.last_sent_at: float | None = None
        #: Bounds and adapts the List requests at the service at once (:mod:`.in_flight`).
        self.in_flight = InFlightLimit(max_in_flight, clock=clock, sleep=sleep)
        check_base_url(base_url)
        api_key = check_api_key(api_key)
        self._http = httpx.Client(
            base_url=self.base_url,
            transport=transport,
            timeout=timeout,
            headers={
                "Authorization": f"Bearer {api_key}",
                "User-Agent": user_agent(),
                "Accept": "application/json",
            },
        )

    def __repr__(self) -> str:
        return f"ListSyncClient(base_url={self.base_url!r}, user_id={self.user_id!r})"

    @property
    def max_in_flight(self) -> int:
        """The most List requests this client keeps at the service at once."""
        return self.in_flight.ceiling

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> ListSyncClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- signal events (§4.1, §4.2) -------------------------------------------------------------

    def ingest_event(self, event: SignalEvent | Mapping[str, Any]) -> EventAck:
        """POST /v1/events: ingest one event; returns its acknowledgement (status ``pending``).

        The event is re-sent when its fate is unknown (at-least-once, see :mod:`.retry`).
        """
        body = validate_event(event)
        response = self._request(
            "POST", "/v1/events", json_body=body, repeat=Repeat.AT_LEAST_ONCE, limited=False
        )
        data = data_of(response)
        if isinstance(data, list) and len(data) == 1:
            # Tolerance: ``data`` as a list holding the one acknowledgement.
            data = data[0]
        if not isinstance(data, Mapping):
            raise unexpected(response, "the acknowledgement object is missing")
        return parse(EventAck, data, response)

    def ingest_batch(
        self,
        events: Sequence[SignalEvent | Mapping[str, Any]],
        *,
        retry_rate_limited: bool = True,
        attempts: Attempts | None = None,
    ) -> BatchIngestResult:
        """POST /v1/events/batch: ingest 1 to 100 events, which may name different signals.

        Events the service refused for their signal's rate limit are in ``rate_limited`` (send
        them again after the reset); a batch re-sent after an unknown outcome has
        ``possibly_duplicated`` set. For pacing many events use
        :func:`listsync.signals.sender.send_events`.

        :param retry_rate_limited: ``False`` raises :class:`RateLimitedError` on a 429 instead of
            waiting (for callers that pace themselves).
        :param attempts: filled in with what retrying did (attempts, seconds waited, 429s).
        :raises UnexpectedResponseError: a 2xx that neither acknowledges nor rate-limits any event.
        """
        request = validate_record(EventBatchRequest, {"events": list(events)}, record="event batch")
        record = attempts if attempts is not None else Attempts()
        response = self._request(
            "POST",
            "/v1/events/batch",
            json_body=request,
            repeat=Repeat.AT_LEAST_ONCE,
            retry_rate_limited=retry_rate_limited,
            attempts=record,
            limited=False,
        )
        body = body_of(response)
        envelope = body if isinstance(body, Mapping) else {"data": body}
        acks = items_of(envelope.get("data"), "events", "acks", "data")
        rate_limited = envelope.get("rate_limited")
        if rate_limited is None and isinstance(envelope.get("data"), Mapping):
            rate_limited = envelope["data"].get("rate_limited")
        if not acks and not rate_limited:
            # Every event is either acknowledged or rate limited (all limited is a 429); an answer
            # settling none cannot be read, and re-sending on it would never end.
            raise unexpected(response, "the answer acknowledges no event and lists none as rate limited")
        info = RateLimitInfo.from_headers(response.headers)
        return parse(
            BatchIngestResult,
            {
                "success": envelope.get("success", True),
                "data": acks,
                "rate_limited": rate_limited or [],
                "possibly_duplicated": record.after_unknown_outcome,
                "rate_limit_limit": info.limit if info else None,
                "rate_limit_remaining": info.remaining if info else None,
                "rate_limit_reset_at": info.reset_at if info else None,
            },
            response,
        )

    # -- targetable people (§4.3-4.6) -----------------------------------------------------------

    def get_targetable_people(
        self,
        table_id: str,
        *,
        target: bool | None = None,
        personas: Sequence[str] | None = None,
        contactable: bool | None = None,
        search: str | None = None,
        account_domain: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> PeoplePage:
        """GET /v1/lists/{tableId}/targetable-people: one page of people, as the service answers.

        ``target``, ``personas`` (people having any of the keys), ``limit`` and ``offset`` are the
        spec's (§4.3). ``contactable``, ``search`` and ``account_domain`` are sent under the names
        of A12, which a service may not know and then ignores: :meth:`iter_targetable_people`
        checks the answer and filters here when it does. Paging fields are read in ``data`` or
        beside it, also from a ``pagination`` (``paging``, ``meta``) object there; a page may
        hold fewer people than ``limit`` (a cap of the service).
        """
        filters = PeopleFilters(contactable, search, account_domain)
        return self._people_page(
            table_id,
            target=target,
            personas=personas,
            filters=filters,
            limit=limit,
            offset=offset,
            ignored=set(),
        )

    def iter_targetable_people(
        self,
        table_id: str,
        *,
        page_size: int = 100,
        target: bool | None = None,
        personas: Sequence[str] | None = None,
        contactable: bool | None = None,
        search: str | None = None,
        account_domain: str | None = None,
    ) -> Iterator[ListedPerson]:
        """Every person matching the filters, page after page (see :func:`.paging.iter_offset_pages`).

        Every answer is checked against the filters the spec does not name: when a person breaks
        one, the service is taken to ignore it, a warning says so once, and from then on that
        filter is applied here (:attr:`filters_applied_here` lists them).
        """
        filters = PeopleFilters(contactable, search, account_domain)
        ignored = self.filters_applied_here

        def fetch(offset: int) -> tuple[list[ListedPerson], bool | None, int | None]:
            page = self._people_page(
                table_id,
                target=target,
                personas=personas,
                filters=filters,
                limit=page_size,
                offset=offset,
                ignored=ignored,
            )
            return page.people, page.more, page.total

        people = iter_offset_pages(fetch, what=f"people of {table_id}", in_flight=self.max_in_flight)
        if not filters.active():
            yield from people  # nothing to check: the unfiltered read of a whole List stays cheap
            return
        yield from kept_to_filters(people, filters, ignored, table_id)

    def iter_targetable_people_records(
        self,
        table_id: str,
        *,
        page_size: int = 100,
        watch: ReadWatch | None = None,
        account_domain: str | None = None,
        pages_ahead: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Every person of the List, or of the account ``account_domain`` (checked as
        :meth:`iter_targetable_people` checks its filters), as the JSON object the service sent,
        page after page (``watch``, ``pages_ahead``: :func:`~.paging.iter_offset_pages`).

        For reads into columns (:func:`listsync.sync.people.frames.list_frame`), which check the
        field types a batch at a time instead of a model per person; anything but an object where
        a person should be is refused here.
        """
        path = _list_path(table_id, "targetable-people")
        filters = PeopleFilters(account_domain=account_domain)
        ignored = self.filters_applied_here

        def fetch(offset: int) -> tuple[list[dict[str, Any]], bool | None, int | None]:
            params = {**filters.params(ignored), "limit": page_size, "offset": offset}
            response = self._request("GET", path, params=params)
            people, fields = page_of(response, "people", "items", "data")
            if not all(isinstance(person, dict) for person in people):
                raise unexpected(response, "cannot read PeoplePage: a person is not a JSON object")
            paging = parse(PeoplePage, fields, response)  # the paging fields; people checked above
            return people, paging.more, paging.total

        people = iter_offset_pages(
            fetch,
            what=f"people of {table_id}",
            in_flight=self.max_in_flight,
            watch=watch,
            pages_ahead=pages_ahead,
        )
        return people if account_domain is None else kept_to_filters(people, filters, ignored, table_id)

    def _people_page(
        self,
        table_id: str,
        *,
        target: bool | None,
        personas: Sequence[str] | None,
        filters: PeopleFilters,
        limit: int | None,
        offset: int | None,
        ignored: set[str],
    ) -> PeoplePage:
        params = {
            "target": _bool_param(target),
            "personas": ",".join(personas) if personas else None,
            **filters.params(ignored),
            "limit": limit,
            "offset": offset,
        }
        response = self._request("GET", _list_path(table_id, "targetable-people"), params=params)
        people, paging = page_of(response, "people", "items", "data")
        return parse(PeoplePage, {**paging, "people": people}, response)

    def add_people(
        self,
        table_id: str,
        accounts: Sequence[AccountPeople | Mapping[str, Any]],
        *,
        duplicate_strategy: str | None = None,
    ) -> WriteResult:
        """POST /v1/lists/{tableId}/targetable-people: add people to account rows found by domain.

        The service matches a person with an e-mail or profile URL to an existing one (§4.4), so
        adding such people twice is harmless and the request is retried. A person with neither
        would be added twice: a request holding one is sent at most once, and a lost answer
        raises :class:`OutcomeUnknownError` (re-read the account before sending it again). An
        unknown domain raises :class:`AccountsNotFoundError` and nothing is applied (A14).
        """
        request = self._as_user(
            AddPeopleRequest, "people add", accounts=list(accounts), duplicateStrategy=duplicate_strategy
        )
        mergeable = all(is_merged_on_add(person) for account in request.accounts for person in account.people)
        repeat = Repeat.SAFE if mergeable else Repeat.AT_MOST_ONCE
        return self._write("POST", _list_path(table_id, "targetable-people"), request, repeat)

    def update_people(
        self, table_id: str, accounts: Sequence[AccountPatches | Mapping[str, Any]]
    ) -> WriteResult:
        """PATCH /v1/lists/{tableId}/targetable-people: change fields of matched people.

        People not found are listed in ``not_found`` (A18). Idempotent, so retried.
        """
        request = self._as_user(UpdatePeopleRequest, "people patch", accounts=list(accounts))
        return self._write("PATCH", _list_path(table_id, "targetable-people"), request, Repeat.SAFE)

    def delete_people(
        self, table_id: str, accounts: Sequence[AccountDeletes | Mapping[str, Any]]
    ) -> WriteResult:
        """DELETE /v1/lists/{tableId}/targetable-people (JSON body): remove matched people.

        People already gone are listed in ``not_found``, not an error (A19). Idempotent, so retried.
        """
        request = self._as_user(DeletePeopleRequest, "people delete", accounts=list(accounts))
        return self._write("DELETE", _list_path(table_id, "targetable-people"), request, Repeat.SAFE)

    # -- rows and cells (§4.7-4.9, GET rows) ----------------------------------------------------

    def add_rows(self, table_id: str, rows: Sequence[RowAdd | Mapping[str, Any]]) -> WriteResult:
        """POST /v1/lists/{tableId}/rows: add rows; ``row_ids`` holds their ids when returned.

        Not idempotent, so never repeated blindly: a timeout after sending raises
        :class:`OutcomeUnknownError` and a 5xx raises :class:`ServerError`; re-read before
        re-sending. Only failures that prove nothing was applied (no connection, 429) are retried.
        """
        request = self._as_user(AddRowsRequest, "rows add", rows=list(rows))
        return self._write("POST", _list_path(table_id, "rows"), request, Repeat.AT_MOST_ONCE)

    def update_cells(self, table_id: str, updates: Sequence[CellUpdate | Mapping[str, Any]]) -> WriteResult:
        """PATCH /v1/lists/{tableId}/cells: set cell values in batch. Idempotent, so retried."""
        request = self._as_user(UpdateCellsRequest, "cells update", updates=list(updates))
        return self._write("PATCH", _list_path(table_id, "cells"), request, Repeat.SAFE)

    def delete_rows(self, table_id: str, row_ids: Sequence[str]) -> WriteResult:
        """DELETE /v1/lists/{tableId}/rows (JSON body): delete rows by id.

        Rows already gone are listed in ``not_found``, or answered 404 and treated alike (A19).
        """
        request = self._as_user(DeleteRowsRequest, "rows delete", rowIds=list(row_ids))
        return self._write("DELETE", _list_path(table_id, "rows"), request, Repeat.SAFE)

    def get_rows(
        self,
        table_id: str,
        *,
        row_ids: Sequence[str] | None = None,
        index: int | None = None,
        column_id: str | None = None,
        operator: str | None = None,
        query: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> RowsPage:
        """GET /v1/lists/{tableId}/rows: rows by id, by position, or filtered on one column.

        Modes (public docs): ``row_ids``; ``index``; or ``column_id`` + ``operator`` (``eq``,
        ``contains``, ``is_not_empty``, ...) + ``query`` with ``limit``/``offset``.
        """
        params = {
            "rowIds": ",".join(row_ids) if row_ids else None,
            "index": index,
            "columnId": column_id,
            "operator": operator,
            "query": query,
            "limit": limit,
            "offset": offset,
        }
        rows, paging, response = self._rows_page(table_id, params)
        return parse(RowsPage, {**paging, "rows": rows}, response)

    def get_row_records(
        self,
        table_id: str,
        *,
        column_id: str,
        operator: str,
        limit: int | None = None,
        offset: int | None = None,
    ) -> tuple[list[dict[str, Any]], RowsPage]:
        """GET /v1/lists/{tableId}/rows filtered on one column, as :meth:`get_rows`, each row as
        the JSON object the service sent, and the page's paging fields (its ``rows`` empty).

        For reads of a whole List into columns (:func:`listsync.sync.rows.read_list_rows`), which
        take the cells they need a page at a time instead of a model per row and cell (three times
        the cost of reading the page). A row that is not an object with a text ``id`` and an object
        of ``cells`` is refused here, as :meth:`get_rows` refuses it.
        """
        params = {"columnId": column_id, "operator": operator, "limit": limit, "offset": offset}
        rows, paging, response = self._rows_page(table_id, params)
        for row in rows:
            if not (
                isinstance(row, dict)
                and isinstance(row.get("id"), str)
                and isinstance(row.get("cells", {}), dict)
            ):
                raise unexpected(
                    response, "cannot read RowsPage: a row is not an object with a text id and cells"
                )
        return rows, parse(RowsPage, paging, response)

    def _rows_page(
        self, table_id: str, params: Mapping[str, Any]
    ) -> tuple[list[Any], dict[str, Any], httpx.Response]:
        response = self._request("GET", _list_path(table_id, "rows"), params=params)
        rows, paging = page_of(response, "rows", "items", "data")
        return rows, paging, response

    def iter_rows(
        self,
        table_id: str,
        *,
        column_id: str | None = None,
        operator: str | None = None,
        query: str | None = None,
        page_size: int = 100,
    ) -> Iterator[Row]:
        """Every row matching the filter (all rows without one, A22), page after page.

        Paging ends as :func:`.paging.iter_offset_pages` says: never on a short page.
        """

        def fetch(offset: int) -> tuple[list[Row], bool | None, int | None]:
            page = self.get_rows(
                table_id, column_id=column_id, operator=operator, query=query, limit=page_size, offset=offset
            )
            return page.rows, page.more, page.total

        return iter_offset_pages(fetch, in_flight=self.max_in_flight)

    def list_lists(self) -> list[ListInfo]:
        """GET /v1/lists: the Lists the key can use (also the connection test).

        A List's id is read from ``id`` or ``tableId``; other fields are kept as extras.
        """
        response = self._request("GET", "/v1/lists")
        return [parse(ListInfo, item, response) for item in page_of(response, "lists", "items", "data")[0]]

    # -- plumbing -------------------------------------------------------------------------------

    def _as_user(self, model: type[WireT], record: str, **fields: Any) -> WireT:
        """The body of a List write (``fields`` by their wire names), acting as the client's user."""
        return validate_record(model, {"userId": self.user_id, **fields}, record=record)

    def _write(self, method: str, path: str, request: WireModel, repeat: Repeat) -> WriteResult:
        response = self._request(method, path, json_body=request, repeat=repeat)
        return write_result(response)

    def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: WireModel | None = None,
        params: Mapping[str, Any] | None = None,
        repeat: Repeat = Repeat.READ,
        retry_rate_limited: bool = True,
        attempts: Attempts | None = None,
        limited: bool = True,
    ) -> httpx.Response:
        """Send a request, retried as ``repeat`` allows; ``limited``: in a slot of
        :attr:`in_flight` (every List request; event ingestion is paced per signal instead, so
        that one signal's 429 holds back no other)."""
        query = {key: value for key, value in (params or {}).items() if value is not None}
        body, headers = (None, None) if json_body is None else (json_body.wire_json(), _JSON)  # made once
        if method == "GET" and self.user_id is not None:
            query.setdefault("userId", self.user_id)

        def send() -> httpx.Response:
            with self.in_flight.slot() if limited else nullcontext():
                return answer()

        def answer() -> httpx.Response:
            self.last_sent_at = self.clock()
            try:
                response = self._http.request(
                    method, path, params=query or None, content=body, headers=headers
                )
            except _NOT_SENT as exc:
                raise TransportError(f"{method} {path}: could not reach the service: {exc}") from None
            except httpx.TransportError as exc:
                raise OutcomeUnknownError(
                    f"{method} {path}: no answer ({type(exc).__name__}): {exc}"
                ) from None
            # The body is read whole. httpx's stream of it points back at the response, a cycle
            # that only a full garbage collection frees; a plain stream of the same bytes lets
            # each response (a page of the List: a few hundred kB) go as soon as it is read.
            response.stream = httpx.ByteStream(response.content)
            # Only a 2xx is success: httpx does not follow redirects, so a 3xx applied nothing.
            if not response.is_success:
                raise error_from_response(response, now=self.clock())
            return response

        extra = {"rand": self._rand} if self._rand is not None else {}
        return call_with_retries(
            send,
            repeat=repeat,
            policy=self.retry_policy,
            clock=self.clock,
            sleep=self.sleep,
            attempts=attempts,
            retry_rate_limited=retry_rate_limited,
            **extra,
        )


def _list_path(table_id: str, resource: str) -> str:
    """The path of a List's resource, its tableId percent-encoded (``?``, ``#``, ``%`` included).

    :raises ValueError: see :func:`check_table_id`, before any request.
    """
    check_table_id(table_id)
    return f"/v1/lists/{quote(table_id, safe='')}/{resource}"


def _bool_param(value: bool | None) -> str | None:
    return None if value is None else str(value).lower()
