"""Reading paged answers without relying on what the spec leaves open.

The spec names ``limit`` and ``offset`` (§4.3) but not the answer's shape, its page-size bounds or
its end marker. So paging here relies on none of them: a page shorter than asked is a server's cap,
not the end, and paging ends only on an explicit end (a ``hasMore``/``truncated`` flag that says
so, or the ``total`` reached) or an empty page.

The spec also says GET targetable-people filters by contactability and by text search without
naming the parameters (§4.3), and names no account-domain filter at all. :class:`PeopleFilters`
sends them under the names of docs/assumptions.md A12 and checks every answer: a person the filter
should have kept out shows that the service ignored it, and from then on that filter is applied
here instead (the client remembers, so it is reported once and no longer sent).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from listsync.client.errors import UnexpectedResponseError
from listsync.client.models import ListedPerson
from listsync.progress import Progress

log = logging.getLogger(__name__)

ItemT = TypeVar("ItemT")
PersonT = TypeVar("PersonT", ListedPerson, dict[str, Any])

#: ``fetch(offset)`` answers a page: its items, its "more" flag and its total (``None`` when unknown).
PageFetcher = Callable[[int], tuple[list[ItemT], bool | None, int | None]]


@dataclass
class ReadWatch:
    """What a paged read of a List saw of the List moving under it (a torn read).

    Given to :func:`iter_offset_pages`, it makes the pages overlap by one item, so that a page is
    known to join the one before, and records each sign that the List moved between pages: a total
    that changed, a page that does not start with the last item of the page before (items were
    removed or inserted before it: some were skipped, or are read twice), a read that ended short
    of (or past) the total it stated, a first page that changed by the end of the read. Items
    changed within later pages already read, in a way that shifts nothing, are not noticed: the
    next read sees them. ``problems`` stays empty for a steady read.
    """

    problems: list[str] = field(default_factory=list)

    @property
    def steady(self) -> bool:
        return not self.problems


def iter_offset_pages(
    fetch: PageFetcher[ItemT],
    *,
    what: str = "items",
    in_flight: int = 1,
    watch: ReadWatch | None = None,
    pages_ahead: int | None = None,
) -> Iterator[ItemT]:
    """Yield the items of offset-paged results until the service says they end.

    Paging stops on a ``False`` "more" flag, on reaching the ``total``, or on an empty page; a
    short page only moves the offset on by what it held. A page identical to the previous one
    means the service ignored ``offset``: that raises :class:`UnexpectedResponseError` rather than
    looping forever. A long read logs the pages and ``what`` it has read so far every ten seconds.

    :param in_flight: pages asked for at once. Past the first page, the pages that follow are
        asked for ahead, at the offsets the page size just served gives (never past a known
        ``total``), and used in order; a page that came back shorter makes the pages asked for
        after it worthless, so they are dropped and asked for again from the offset reached. The
        end is still only ever the explicit one above: a page asked for past it is dropped.
    :param pages_ahead: pages kept asked for ahead of the reader, ``in_flight`` of them at once
        (``in_flight`` when None): a reader that takes many pages at a time and then works on
        them finds the next ones read meanwhile. Needs ``in_flight`` above 1.
    :param watch: notes a List moving under the read (:class:`ReadWatch`); each page after the
        first is then asked for one item early, that item checked against the last one read and
        not yielded again, and a read of several pages asks for the first again at its end. The
        read goes on to its end whatever it notes.
    """
    progress = Progress(log, "%d pages, %d %s read so far")
    offset = 0  # items yielded so far
    asked = 0  # the offset the next page is asked for at: one early when it overlaps
    overlaps = False
    first_total: int | None = None
    pages = 0
    previous: list[ItemT] | None = None
    first: list[ItemT] = []
    ahead: deque[tuple[int, Future[tuple[list[ItemT], bool | None, int | None]]]] = deque()
    pool = ThreadPoolExecutor(in_flight, thread_name_prefix="listsync-pages") if in_flight > 1 else None
    depth = max(in_flight, pages_ahead or 0)
    try:
        while True:
            if ahead and ahead[0][0] == asked:
                items, more, total = ahead.popleft()[1].result()
            else:
                _drop(ahead)
                items, more, total = fetch(asked)
            pages += 1
            progress(pages, offset + len(items), what)
            if items and items == previous:
                raise UnexpectedResponseError(
                    200, "GET", "", f"the page at offset {asked} repeats the previous one"
                )
            new = items
            if overlaps and previous is not None and watch is not None:
                if not items or items[0] != previous[-1]:
                    watch.problems.append(
                        f"the page at offset {asked} does not join the page before it: "
                        "items were removed or added before it while the List was read"
                    )
                new = items[1:]
            if watch is not None and total is not None:
                if first_total is None:
                    first_total = total
                elif total != first_total:
                    watch.problems.append(f"the total went from {first_total} to {total} between pages")
                    first_total = total
            yield from new
            offset += len(new)
            if not new or more is False or (more is None and total is not None and offset >= total):
                if watch is not None and total is not None and offset != total:
                    watch.problems.append(f"the read ended with {offset} of the {total} items it stated")
                if watch is not None and pages > 1:
                    _drop(ahead)
                    # Items removed and as many added within the pages already read shift nothing
                    # the overlaps see; the first page read again shows them there.
                    if fetch(0)[0] != first:
                        watch.problems.append("the first page changed while the pages after it were read")
                return
            if pages == 1:
                first = items
            previous = items
            # A page of one item cannot overlap the next and still move on.
            overlaps = watch is not None and len(items) > 1
            asked = offset - 1 if overlaps else offset
            if pool is not None:
                step = len(items) - 1 if overlaps else len(items)
                following = ahead[-1][0] + step if ahead else asked
                last = None if total is None else total - (1 if overlaps else 0)
                while len(ahead) < depth and (last is None or following < last):
                    ahead.append((following, pool.submit(fetch, following)))
                    following += step
    finally:
        _drop(ahead)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _drop(ahead: deque[tuple[int, Future[Any]]]) -> None:
    """Give up the pages asked for ahead: those not started are cancelled, the others ignored."""
    for _offset, future in ahead:
        future.cancel()
    ahead.clear()


#: The unnamed filters, by the names used in code and summaries.
FILTER_NAMES: tuple[str, ...] = ("contactable", "search", "account_domain")


@dataclass(frozen=True)
class PeopleFilters:
    """The filters of GET targetable-people whose parameter names the spec does not give.

    :ivar contactable: people with (``True``) or without (``False``) an e-mail or phone (A12).
    :ivar search: a case-insensitive substring of first or last name, e-mail, title or domain.
    :ivar account_domain: people of that account only.
    """

    contactable: bool | None = None
    search: str | None = None
    account_domain: str | None = None

    def active(self) -> list[str]:
        """The names of the filters set."""
        return [name for name in FILTER_NAMES if getattr(self, name) is not None]

    def params(self, ignored: set[str]) -> dict[str, Any]:
        """Query parameters (A12 names) of the active filters the service is not known to ignore."""
        names = {"contactable": "contactable", "search": "search", "account_domain": "accountDomain"}
        params: dict[str, Any] = {}
        for name in self.active():
            if name not in ignored:
                value = getattr(self, name)
                params[names[name]] = str(value).lower() if isinstance(value, bool) else value
        return params

    def failed_by(self, person: ListedPerson | Mapping[str, Any]) -> list[str]:
        """The active filters ``person`` (a model, or the JSON object the service sent) does not
        satisfy."""
        email, phone, domain = (_field(person, name) for name in ("email", "phone_number", "account_domain"))
        tests: dict[str, Callable[[], bool]] = {
            "contactable": lambda: bool(email or phone) is self.contactable,
            "search": lambda: self._mentions(person),
            "account_domain": lambda: same_domain(domain, self.account_domain),
        }
        return [name for name in self.active() if not tests[name]()]

    def _mentions(self, person: ListedPerson | Mapping[str, Any]) -> bool:
        wanted = (self.search or "").strip().lower()
        names = ("first_name", "last_name", "email", "title", "account_domain")
        fields = (_field(person, name) for name in names)
        return any(wanted in value.lower() for value in fields if isinstance(value, str) and value)


def _field(person: ListedPerson | Mapping[str, Any], name: str) -> Any:
    """A person's field ``name``: a model's attribute, or a JSON object's value (``accountDomain``
    as the service spells it)."""
    if not isinstance(person, Mapping):
        return getattr(person, name)
    return person.get("accountDomain", person.get(name)) if name == "account_domain" else person.get(name)


def kept_to_filters(
    people: Iterable[PersonT], filters: PeopleFilters, ignored: set[str], what: str
) -> Iterator[PersonT]:
    """``people`` who satisfy ``filters``. A person who breaks one shows the service ignores it: it
    is added to ``ignored`` (applied here from then on, its parameter no longer sent) with one
    warning naming ``what`` was read."""
    for person in people:
        broken = filters.failed_by(person)
        for name in broken:
            if name not in ignored:
                ignored.add(name)
                log.warning(
                    "GET targetable-people of %s ignored the %s filter; it is applied by the client "
                    "from now on (every matching page is read)",
                    what,
                    name,
                )
        if not broken:
            yield person


def same_domain(a: str | None, b: str | None) -> bool:
    """Whether two spellings name one account domain (case, scheme, ``www.`` and slashes aside)."""
    return a is not None and b is not None and _bare_domain(a) == _bare_domain(b)


def _bare_domain(value: str) -> str:
    host = value.strip().lower().partition("://")[2] or value.strip().lower()
    return host.split("/", 1)[0].rstrip(".").removeprefix("www.")
