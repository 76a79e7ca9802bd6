"""The List endpoints: targetable people (spec §4.3–4.6), rows and cells (§4.7–4.9), GET rows.

Every write validates the whole request, then applies it, so a refused request changes nothing
and a retry is safe (assumptions A11, A14, A20, A21, A23). Statuses, messages and response bodies
follow ``docs/assumptions.md``, as the profile (:mod:`listsync.emulator.profiles`) varies them:
page cap, filter names, ``match`` keys, unknown accounts, caps, missing rows, the statuses and
refusal wordings, the forms people are kept in and the lag of reads behind writes here; the wording
of answers in :mod:`listsync.emulator.answers`. Answers are returned in the reference form (A13,
A18).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from operator import ge, gt, le, lt
from typing import Any

from listsync.emulator.config import ColumnConfig, EmulatorConfig
from listsync.emulator.store import ApiError, EmulatorState, ListState, Person, Row, normalize_domain
from listsync.emulator.windows import iso_utc

DEFAULT_PAGE = 100

PERSON_TEXT_FIELDS = (
    "first_name",
    "last_name",
    "bio",
    "title",
    "email",
    "phone_number",
    "network_profile_url",
    "avatar_url",
    "persona_rationale",
)
PERSON_FIELDS = frozenset((*PERSON_TEXT_FIELDS, "connection_paths", "target", "personas"))
URL_FIELDS = frozenset(("network_profile_url", "avatar_url"))
_URL_SCHEME = re.compile(r"(?:[a-z][a-z0-9+.-]*:)?//")
E164 = re.compile(r"\+[1-9][0-9]{1,14}")
DUPLICATE_STRATEGIES = ("update-existing", "skip")
OPERATORS = frozenset(
    (
        "eq",
        "not_eq",
        "contains",
        "not_contains",
        "like",
        "starts_with",
        "ends_with",
        "gt",
        "gte",
        "lt",
        "lte",
        "is_empty",
        "is_not_empty",
    )
)


def _bad(message: str) -> ApiError:
    return ApiError(400, message)


def _array(body: Mapping[str, Any], name: str, cap: int) -> list[Any]:
    items = body.get(name)
    if not isinstance(items, list) or not items:
        raise _bad(f"{name} must be a non-empty array")
    if len(items) > cap:
        raise _bad(f"Maximum {cap} {name} per request")
    return items


def _object(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(f"{path} must be an object")
    return value


def _validate_person(raw: object, path: str, *, partial: bool) -> Person:
    """A Person (spec §2.1) with absent fields dropped; ``partial`` for a PATCH ``patch``.

    In a patch a ``null`` clears an optional field, so it is kept as ``None``.
    """
    person = _object(raw, path)
    unknown = sorted(set(person) - PERSON_FIELDS)
    if unknown:
        raise _bad(f"{path}: unknown field {unknown[0]}")
    if not partial or "first_name" in person:
        first = person.get("first_name")
        if not isinstance(first, str) or not first.strip():
            raise _bad(f"{path}.first_name is required")
    clean: Person = {}
    for name, value in person.items():
        if value is None:
            if partial:
                clean[name] = None
            continue
        where = f"{path}.{name}"
        if name in PERSON_TEXT_FIELDS and not isinstance(value, str):
            raise _bad(f"{where} must be a string")
        if name == "phone_number" and not E164.fullmatch(value):
            raise _bad(f"{where} must be E.164: a plus sign followed by digits")
        if name == "target" and not isinstance(value, bool):
            raise _bad(f"{where} must be a boolean")
        if name == "personas" and not (isinstance(value, list) and all(isinstance(p, str) for p in value)):
            raise _bad(f"{where} must be an array of strings")
        if name == "connection_paths":
            _validate_connection_paths(value, where)
        clean[name] = value
    return clean


def _validate_connection_paths(value: object, path: str) -> None:
    if not isinstance(value, list):
        raise _bad(f"{path} must be an array")
    for index, raw in enumerate(value):
        where = f"{path}[{index}]"
        item = _object(raw, where)
        if not isinstance(item.get("userId"), str) or not item["userId"]:
            raise _bad(f"{where}.userId is required")
        if item.get("source") not in ("network", "relation"):
            raise _bad(f"{where}.source must be network or relation")
        if item.get("degree") not in ("1st", "2nd"):
            raise _bad(f"{where}.degree must be 1st or 2nd")
        if item.get("context") is not None and not isinstance(item["context"], str):
            raise _bad(f"{where}.context must be a string")


def canonical_url(value: str) -> str:
    """A URL in the ``url`` canonical form: trimmed, lower case, scheme https (given when it has
    none), no trailing slash. A value without anything after the scheme is only trimmed and
    lower-cased."""
    url = value.strip().lower()
    scheme = _URL_SCHEME.match(url)
    rest = (url[scheme.end() :] if scheme else url).rstrip("/")
    return f"https://{rest}" if rest else url


def canonical_person(person: Person, forms: frozenset[str]) -> Person:
    """``person`` (a Person, a patch, a ``match`` or a DELETE identity) with its text fields in the
    profile's ``canonical_forms``; the same object when there are none. Other values are left as
    they are (a ``None`` of a patch still clears)."""
    if not forms:
        return person
    kept = dict(person)
    for name in PERSON_TEXT_FIELDS:
        value = kept.get(name)
        if not isinstance(value, str):
            continue
        if "whitespace" in forms:
            value = " ".join(value.split())
        if name == "email" and "email_case" in forms:
            value = value.lower()
        if name in URL_FIELDS and "url" in forms:
            value = canonical_url(value)
        kept[name] = value
    return kept


def is_contactable(person: Person) -> bool:
    """Has a contact channel: an email or a phone number (A12; also the default of ``target``)."""
    return bool(person.get("email") or person.get("phone_number"))


def identity_of(person: Mapping[str, Any]) -> tuple[str, object] | None:
    """The identity a PATCH ``match`` or a DELETE entry names (A17): the first present of email,
    profile URL, phone, first + last name."""
    if person.get("email"):
        return "email", str(person["email"]).lower()
    if person.get("network_profile_url"):
        return "network_profile_url", person["network_profile_url"]
    if person.get("phone_number"):
        return "phone_number", person["phone_number"]
    if person.get("first_name") and person.get("last_name"):
        return "name", (str(person["first_name"]).lower(), str(person["last_name"]).lower())
    return None


def _identity(entry: Mapping[str, Any], where: str) -> tuple[str, object]:
    """:func:`identity_of` an entry, or a 400 naming the entry at ``where``."""
    identity = identity_of(entry)
    if identity is None:
        raise _bad(f"{where} must name email, network_profile_url, phone_number, or first_name and last_name")
    return identity


def _has_identity(person: Person, identity: tuple[str, object]) -> bool:
    key, wanted = identity
    if key == "email":
        return str(person.get("email") or "").lower() == wanted
    if key == "name":
        name = (str(person.get("first_name") or "").lower(), str(person.get("last_name") or "").lower())
        return name == wanted
    return person.get(key) == wanted


def _find_person(row: Row | None, identity: tuple[str, object]) -> Person | None:
    """The person of the account row with this identity; None also when the account is unknown."""
    if row is None:
        return None
    return next((p for p in row.people if _has_identity(p, identity)), None)


def _find_duplicate(people: list[Person], person: Person) -> Person | None:
    """A16: the same email (case-insensitive) or the same profile URL within the account."""
    email = str(person.get("email") or "").lower()
    url = person.get("network_profile_url")
    for existing in people:
        if email and str(existing.get("email") or "").lower() == email:
            return existing
        if url and existing.get("network_profile_url") == url:
            return existing
    return None


def _check_value(column: ColumnConfig, value: object, path: str) -> object:
    """A cell value valid for the column's type, as stored (an enum label becomes its key)."""
    if value is None:
        return None
    kind = column.type
    if kind == "text" and not isinstance(value, str):
        raise _bad(f"{path} must be a string")
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise _bad(f"{path} must be a number")
    if kind == "boolean" and not isinstance(value, bool):
        raise _bad(f"{path} must be a boolean")
    if kind == "date" and not (isinstance(value, str) and _is_iso_date(value)):
        raise _bad(f"{path} must be an ISO 8601 date")
    if kind == "enum":
        for option in column.options:
            if value in (option.key, option.label):
                return option.key
        raise _bad(f"{path} must be one of {', '.join(o.key for o in column.options)}")
    return value


def _is_iso_date(value: str) -> bool:
    try:
        if len(value) == 10:
            date.fromisoformat(value)
        else:
            datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
    except ValueError:
        return False
    return True


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _is_empty(value: object) -> bool:
    return value is None or value in ("", [], {})


_LIKE_WILDCARDS = {"%": ".*", "_": "."}
_ORDERINGS: dict[str, Callable[[Any, Any], bool]] = {"gt": gt, "gte": ge, "lt": lt, "lte": le}


def _like(pattern: str) -> re.Pattern[str]:
    """SQL LIKE: ``%`` any run, ``_`` one character; without wildcards an exact match."""
    parts = (_LIKE_WILDCARDS.get(c) or re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


def _row_filter(column: ColumnConfig, operator: str, query: str | None) -> Callable[[object], bool]:
    """A predicate on a cell value for the documented GET rows filter mode.

    Text comparisons ignore case; on a number column the ordering operators and ``eq`` compare
    numbers; on an enum column ``eq`` matches an option's key or label (public docs).
    """
    if operator in ("is_empty", "is_not_empty"):
        wanted_empty = operator == "is_empty"
        return lambda value: _is_empty(value) is wanted_empty
    if query is None:
        raise _bad(f"query is required for operator {operator}")
    if operator in _ORDERINGS:
        ordered = _ORDERINGS[operator]
        if column.type != "number":
            return lambda value: not _is_empty(value) and ordered(_text(value), query)
        try:
            bound = float(query)
        except ValueError:
            raise _bad(f"query must be a number for column {column.id}") from None
        return lambda value: isinstance(value, (int, float)) and ordered(float(value), bound)
    wanted = query.lower()
    # not_eq and not_contains are the negations of eq and contains.
    positive = operator.removeprefix("not_")
    test: Callable[[object], bool]
    if positive == "eq" and column.type == "enum":
        keys = {o.key for o in column.options if wanted in (o.key.lower(), o.label.lower())}

        def test(value: object) -> bool:
            return value in keys

    elif positive == "eq" and column.type == "number":

        def test(value: object) -> bool:
            return _number_equals(value, query)

    elif positive == "like":
        pattern = _like(query)

        def test(value: object) -> bool:
            return not _is_empty(value) and pattern.fullmatch(_text(value)) is not None

    else:
        text_tests: dict[str, Callable[[str], bool]] = {
            "eq": lambda text: text == wanted,
            "contains": lambda text: wanted in text,
            "starts_with": lambda text: text.startswith(wanted),
            "ends_with": lambda text: text.endswith(wanted),
        }
        text_test = text_tests[positive]

        def test(value: object) -> bool:
            return not _is_empty(value) and text_test(_text(value).lower())

    return (lambda value: not test(value)) if positive != operator else test


def _number_equals(value: object, query: str) -> bool:
    try:
        return isinstance(value, (int, float)) and float(value) == float(query)
    except ValueError:
        return False


def _int_param(params: Mapping[str, str], name: str, default: int, low: int, high: int | None) -> int:
    raw = params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise _bad(f"{name} must be an integer {bounds}")
    return value


def _bool_param(params: Mapping[str, str], name: str) -> bool | None:
    raw = params.get(name)
    if raw is None:
        return None
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise _bad(f"{name} must be true or false")


@dataclass(frozen=True)
class _Account:
    """One entry of a people write's ``accounts``: the domain as sent, its row (None when the List
    has no such account and the profile accepts that), the entry's people and their path."""

    domain: str
    row: Row | None
    people: list[Any]
    path: str

    def entries(self) -> Iterator[tuple[str, Any]]:
        """Each entry of ``people`` with its path, ``accounts[<i>].people[<j>]``."""
        return ((f"{self.path}[{index}]", raw) for index, raw in enumerate(self.people))

    def shown_domain(self, lst: ListState) -> str:
        """The domain a ``notFound`` entry names: the List's own spelling when it has the account."""
        if self.row is None:
            return self.domain
        return lst.account_domain(self.row) or self.domain


@dataclass(frozen=True)
class _Change:
    """One PATCH or DELETE people entry: its account, ``match``, identity and (PATCH) ``patch``."""

    account: _Account
    match: dict[str, Any]
    identity: tuple[str, object]
    patch: Person | None

    def not_found(self, lst: ListState) -> dict[str, Any]:
        return {"accountDomain": self.account.shown_domain(lst), "match": self.match}


class ListOperations:
    """The List endpoints over an :class:`EmulatorState`; ``clock`` gives epoch seconds."""

    def __init__(self, config: EmulatorConfig, state: EmulatorState, clock: Callable[[], float]) -> None:
        self._users = frozenset(config.users)
        self._dialect = config.dialect
        self._caps = self._dialect.caps
        self._forms = self._dialect.canonical_forms
        self._lag = self._dialect.lag_seconds
        self._other_wording = self._dialect.refusal_wording == "other"
        self._state = state
        self._clock = clock

    def table(self, table_id: str) -> ListState:
        lst = self._state.lists.get(table_id)
        if lst is None:
            raise ApiError(
                self._dialect.list_not_found_status, f"List not found or not accessible: {table_id}"
            )
        return lst

    def _page_size(self, params: Mapping[str, str]) -> int:
        """``limit`` (default 100) up to the profile's page cap. Above the cap: a 400, or, when the
        profile does not refuse, a page of the cap's size, shorter than asked and without an error."""
        cap = self._dialect.page_cap
        default = min(DEFAULT_PAGE, cap)
        if self._dialect.page_cap_refuses:
            return _int_param(params, "limit", default, 1, cap)
        return min(_int_param(params, "limit", default, 1, None), cap)

    def _refuse_missing_rows(self, lst: ListState, row_ids: Iterable[str]) -> None:
        """``404 Rows not found: <ids>`` (A20; also DELETE rows when ``missing_row_delete`` is
        ``404``), or ``404 No such row(s): <ids>`` when ``refusal_wording`` is ``other``."""
        missing = [row_id for row_id in row_ids if row_id not in lst.rows]
        if missing:
            prefix = "No such row(s)" if self._other_wording else "Rows not found"
            raise ApiError(404, f"{prefix}: {', '.join(dict.fromkeys(missing))}")

    # ---- lag_seconds: reads behind writes ----------------------------------------------------

    def write(
        self,
        lst: ListState,
        operation: Callable[[ListState, dict[str, Any]], Mapping[str, Any]],
        body: dict[str, Any],
    ) -> Mapping[str, Any]:
        """Apply a List write (one of the six methods below) and answer it at once; under a lag,
        also keep a copy of the List as the write left it, stamped with the time of the answer.
        Without a lag this is the operation alone: nothing is copied."""
        if not self._lag:
            return operation(lst, body)
        before = None if lst.history else lst.copy()
        result = operation(lst, body)  # a refused write raises here, and nothing is kept
        if before is not None:
            lst.history.append((-math.inf, before))
        lst.history.append((self._clock(), lst.copy()))
        return result

    def visible(self, lst: ListState) -> ListState:
        """The List as reads see it: as it is, or under a lag as the newest write answered at
        least ``lag_seconds`` ago left it (before any write: as it was then). Copies no read can
        show again are dropped, all of them once the last write shows."""
        history = lst.history
        if not history:
            return lst
        cutoff = self._clock() - self._lag
        shown = 0
        while shown + 1 < len(history) and history[shown + 1][0] <= cutoff:
            shown += 1
        if shown == len(history) - 1 and history[shown][0] <= cutoff:
            # Every write shows: the List itself is what reads see until the next write.
            history.clear()
            return lst
        del history[:shown]
        return history[0][1]

    def check_user(self, user_id: object) -> None:
        """A9: ``userId`` is optional; when sent it must name a configured user."""
        if user_id is not None and user_id not in self._users:
            raise _bad(f"User not found: {user_id}")

    # ---- Lists -------------------------------------------------------------------------------

    def describe(self, lst: ListState) -> dict[str, Any]:
        return {
            self._dialect.list_id_field: lst.id,
            "name": lst.config.name or lst.id,
            "columns": [
                {
                    "columnId": c.id,
                    "name": c.name or c.id,
                    "type": c.type,
                    **({"options": [o.model_dump() for o in c.options]} if c.type == "enum" else {}),
                }
                for c in lst.config.columns
            ],
            "targetableAccountColumn": lst.config.account_column,
            "uniqueDomains": lst.config.unique_domains,
            "rowCount": len(self.visible(lst).rows),
        }

    def list_lists(self) -> list[dict[str, Any]]:
        return [self.describe(lst) for lst in self._state.lists.values()]

    # ---- targetable people -------------------------------------------------------------------

    def _accounts(self, lst: ListState, body: Mapping[str, Any]) -> list[_Account]:
        """Validate the ``accounts`` array and find each account's row.

        A domain the List lacks refuses the whole request (A14), unless the profile's
        ``unknown_accounts`` is ``create``: then its row is None.
        """
        accounts: list[_Account] = []
        for index, raw in enumerate(_array(body, "accounts", self._caps["accounts"])):
            account = _object(raw, f"accounts[{index}]")
            domain = account.get("accountDomain")
            if not isinstance(domain, str) or not domain.strip():
                raise _bad(f"accounts[{index}].accountDomain is required")
            people = account.get("people")
            if not isinstance(people, list):
                raise _bad(f"accounts[{index}].people must be an array")
            row = lst.row_for_domain(domain)
            accounts.append(_Account(domain, row, people, f"accounts[{index}].people"))
        if sum(len(a.people) for a in accounts) > self._caps["people"]:
            raise _bad(f"Maximum {self._caps['people']} people per request")
        missing = [a.domain for a in accounts if a.row is None]
        # A List without an account column has no accounts: none to create, none to miss.
        accepted = self._dialect.unknown_accounts == "create" and lst.config.account_column is not None
        if missing and not accepted:
            prefix = "Unknown account domain(s)" if self._other_wording else "Account not found"
            raise ApiError(404, f"{prefix}: {', '.join(dict.fromkeys(missing))}")
        return accounts

    def _open_account(self, lst: ListState, domain: str) -> Row:
        """The row of an account the List lacked (``unknown_accounts`` ``create``): a new row whose
        account cell is the domain as sent, or the one an earlier account of the request opened
        under the same normalised domain, so unique domains hold."""
        row = lst.row_for_domain(domain)
        if row is None:
            column = lst.config.account_column
            assert column is not None  # _accounts accepts no unknown domain on a List without one
            row = Row(self._state.new_row_id(), {column: domain}, iso_utc(self._clock()))
            lst.rows[row.id] = row
            lst.changed()
        return row

    def add_people(self, lst: ListState, body: Mapping[str, Any]) -> dict[str, int]:
        """POST targetable-people: add, or per ``duplicateStrategy`` update or skip a duplicate."""
        strategy = body.get("duplicateStrategy", "update-existing")
        if strategy not in DUPLICATE_STRATEGIES:
            raise _bad(f"Invalid duplicateStrategy: {strategy}")
        checked = [
            (
                account,
                [
                    canonical_person(_validate_person(raw, where, partial=False), self._forms)
                    for where, raw in account.entries()
                ],
            )
            for account in self._accounts(lst, body)
        ]
        counts = {"added": 0, "updated": 0, "skipped": 0}
        for account, people in checked:
            row = account.row or self._open_account(lst, account.domain)
            for person in people:
                existing = _find_duplicate(row.people, person)
                if existing is None:
                    person.setdefault("target", is_contactable(person))
                    row.people.append(person)
                    counts["added"] += 1
                elif strategy == "skip":
                    counts["skipped"] += 1
                else:
                    existing.update(person)
                    counts["updated"] += 1
        lst.people_changed()
        return counts

    def _match_identity(self, match: dict[str, Any], where: str) -> tuple[str, object]:
        """The identity a PATCH ``match`` names: any of A17, or only an email when the profile's
        ``patch_match_keys`` is ``email`` (then another key is refused by name)."""
        if self._dialect.patch_match_keys == "email" and not match.get("email"):
            other = next((key for key in match if key != "email"), None)
            if other is not None:
                raise _bad(f"{where}: unsupported key {other}; only email is supported")
            raise _bad(f"{where}.email is required")
        return _identity(match, where)

    def _matched_changes(self, lst: ListState, body: Mapping[str, Any], *, patching: bool) -> list[_Change]:
        """Validate every PATCH or DELETE entry before any is applied."""
        changes = []
        for account in self._accounts(lst, body):
            for where, raw in account.entries():
                entry = _object(raw, where)
                # A match is compared in the form people are kept in; notFound echoes it as sent.
                if patching:
                    match = _object(entry.get("match"), f"{where}.match")
                    identity = self._match_identity(canonical_person(match, self._forms), f"{where}.match")
                    patch = _validate_person(entry.get("patch"), f"{where}.patch", partial=True)
                    changes.append(_Change(account, match, identity, canonical_person(patch, self._forms)))
                else:
                    # DELETE identities are the spec's own (§4.6) in every profile.
                    identity = _identity(canonical_person(entry, self._forms), where)
                    changes.append(_Change(account, entry, identity, None))
        return changes

    def update_people(self, lst: ListState, body: Mapping[str, Any]) -> dict[str, Any]:
        """PATCH targetable-people: apply each ``patch`` to the person its ``match`` names."""
        updated = 0
        not_found = []
        for change in self._matched_changes(lst, body, patching=True):
            person = _find_person(change.account.row, change.identity)
            if person is None or change.patch is None:
                not_found.append(change.not_found(lst))
                continue
            for name, value in change.patch.items():
                if value is None:
                    person.pop(name, None)
                else:
                    person[name] = value
            if "target" not in person:
                # Cleared: back to its §2.1 default, so the target filter still sees the person.
                person["target"] = is_contactable(person)
            updated += 1
        lst.people_changed()
        return {"updated": updated, "notFound": not_found}

    def delete_people(self, lst: ListState, body: Mapping[str, Any]) -> dict[str, Any]:
        """DELETE targetable-people: remove the person each entry identifies (A17, A19)."""
        deleted = 0
        not_found = []
        for change in self._matched_changes(lst, body, patching=False):
            row = change.account.row
            person = _find_person(row, change.identity)
            if row is None or person is None:
                not_found.append(change.not_found(lst))
                continue
            row.people.remove(person)
            deleted += 1
        lst.people_changed()
        return {"deleted": deleted, "notFound": not_found}

    def query_people(self, lst: ListState, params: Mapping[str, str]) -> dict[str, Any]:
        """GET targetable-people (A12, A13): filtered, ordered by account row then insertion."""
        lst = self.visible(lst)
        # The spec names target and personas; the other filters go by the profile's names, and a
        # parameter it does not name is ignored, as a server ignores what it does not know.
        names = self._dialect.filter_names
        target = _bool_param(params, "target")
        contactable = _bool_param(params, names["contactable"])
        personas = frozenset(p.strip() for p in params.get("personas", "").split(",") if p.strip())
        search = params.get(names["search"], "").strip().lower()
        domain = params.get(names["account_domain"])
        limit = self._page_size(params)
        offset = _int_param(params, "offset", 0, 0, None)
        key = (target, contactable, personas, search, domain and normalize_domain(domain))
        matches = lst.people_queries.get(key)
        if matches is None:
            rows = lst.rows.values() if domain is None else filter(None, [lst.row_for_domain(domain)])
            matches = [
                (row, person)
                for row in rows
                for person in row.people
                if (target is None or person.get("target") is target)
                and (contactable is None or is_contactable(person) is contactable)
                and (not personas or not personas.isdisjoint(person.get("personas") or ()))
                and (not search or self._mentions(lst, row, person, search))
            ]
            if len(lst.people_queries) > 32:
                lst.people_queries.clear()
            lst.people_queries[key] = matches
        page = matches[offset : offset + limit]
        return {
            "people": [
                {**person, "accountDomain": lst.account_domain(row), "rowId": row.id} for row, person in page
            ],
            "total": len(matches),
            "limit": limit,
            "offset": offset,
            "hasMore": offset + len(page) < len(matches),
        }

    @staticmethod
    def _mentions(lst: ListState, row: Row, person: Person, search: str) -> bool:
        fields = (person.get(f) for f in ("first_name", "last_name", "email", "title"))
        return any(search in str(v).lower() for v in (*fields, lst.account_domain(row)) if v)

    # ---- rows and cells ----------------------------------------------------------------------

    def _check_unique(self, lst: ListState, final_cells: Mapping[str, Mapping[str, Any]]) -> None:
        """A23: refuse a change that leaves two rows with one domain on a unique account column.

        ``final_cells`` maps the ids of new or changed rows to their cells after the change.
        """
        column = lst.config.account_column
        if column is None or not lst.config.unique_domains:
            return
        owners: dict[str, str] = {}
        for row in lst.rows.values():
            if row.id not in final_cells and not _is_empty(row.cells.get(column)):
                owners[normalize_domain(row.cells[column])] = row.id
        for row_id, cells in final_cells.items():
            value = cells.get(column)
            if _is_empty(value):
                continue
            domain = normalize_domain(value)
            if owners.setdefault(domain, row_id) != row_id:
                raise ApiError(409, f"Duplicate value for unique column {column}: {value}")

    def _column(self, lst: ListState, column_id: object) -> ColumnConfig:
        column = lst.columns.get(column_id) if isinstance(column_id, str) else None
        if column is None:
            raise _bad(f"Column not found: {column_id}")
        return column

    def add_rows(self, lst: ListState, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST rows: new rows with ids ``row_<n>``, returned in request order (A18)."""
        new_rows: dict[str, dict[str, Any]] = {}
        for index, raw in enumerate(_array(body, "rows", self._caps["rows"])):
            cells = _object(_object(raw, f"rows[{index}]").get("cells"), f"rows[{index}].cells")
            checked = {
                column_id: _check_value(
                    self._column(lst, column_id), value, f"rows[{index}].cells.{column_id}"
                )
                for column_id, value in cells.items()
            }
            # Ids are drawn only once the request is known to be valid (placeholder keys until then).
            new_rows[f"\0{index}"] = checked
        self._check_unique(lst, new_rows)
        stamp = iso_utc(self._clock())
        added = []
        for cells in new_rows.values():
            row = Row(self._state.new_row_id(), cells, stamp)
            lst.rows[row.id] = row
            added.append({"id": row.id, "cells": cells})
        lst.changed()
        return {"rows": added, "added": len(added)}

    def update_cells(self, lst: ListState, body: Mapping[str, Any]) -> dict[str, int]:
        """PATCH cells: all updates or none (A20, A23)."""
        updates = _array(body, "updates", self._caps["updates"])
        for index, raw in enumerate(updates):
            update = _object(raw, f"updates[{index}]")
            for name in ("rowId", "columnId"):
                if not isinstance(update.get(name), str):
                    raise _bad(f"updates[{index}].{name} is required")
            if "value" not in update:
                raise _bad(f"updates[{index}].value is required")
        self._refuse_missing_rows(lst, (u["rowId"] for u in updates))
        final: dict[str, dict[str, Any]] = {}
        for index, update in enumerate(updates):
            column = self._column(lst, update["columnId"])
            value = _check_value(column, update["value"], f"updates[{index}].value")
            final.setdefault(update["rowId"], dict(lst.rows[update["rowId"]].cells))[column.id] = value
        self._check_unique(lst, final)
        stamp = iso_utc(self._clock())
        for row_id, cells in final.items():
            row = lst.rows[row_id]
            row.cells = cells
            row.updated_at = stamp
        lst.changed()
        return {"updated": len(updates)}

    def delete_rows(self, lst: ListState, body: Mapping[str, Any]) -> dict[str, Any]:
        """DELETE rows: a missing id is listed in ``notFound``, not an error (A19), or, when the
        profile's ``missing_row_delete`` is ``404``, refuses the whole request."""
        row_ids = _array(body, "rowIds", self._caps["row_deletes"])
        if not all(isinstance(r, str) for r in row_ids):
            raise _bad("rowIds must be an array of strings")
        if self._dialect.missing_row_delete == "404":
            self._refuse_missing_rows(lst, row_ids)
        deleted = 0
        not_found = []
        for row_id in dict.fromkeys(row_ids):
            if lst.rows.pop(row_id, None) is None:
                not_found.append(row_id)
            else:
                deleted += 1
        lst.changed()
        return {"deleted": deleted, "notFound": not_found}

    def get_rows(self, lst: ListState, params: Mapping[str, str]) -> dict[str, Any]:
        """GET rows in the three documented modes, or all rows paged (A22)."""
        lst = self.visible(lst)
        limit = self._page_size(params)
        offset = _int_param(params, "offset", 0, 0, None)
        matched: list[Row]
        if "rowIds" in params:
            wanted = [r for r in params["rowIds"].split(",") if r]
            matched = [lst.rows[r] for r in dict.fromkeys(wanted) if r in lst.rows]
            # A27: the rows asked for, all of them; paging belongs to the filter mode (and A22).
            limit, offset = max(len(matched), 1), 0
        elif "index" in params:
            index = _int_param(params, "index", 0, 0, None)
            rows = list(lst.rows.values())
            matched = rows[index : index + 1]
        elif "columnId" in params:
            column = self._column(lst, params["columnId"])
            operator = params.get("operator", "")
            if operator not in OPERATORS:
                raise _bad(f"operator must be one of {', '.join(sorted(OPERATORS))}")
            query = params.get("query")
            keep = _row_filter(column, operator, query)
            # Consecutive pages of one filter slice one list rather than filter the whole List again.
            key = (column.id, operator, query)
            cached = lst.row_queries.get(key)
            if cached is None:
                cached = [row for row in lst.rows.values() if keep(row.cells.get(column.id))]
                if len(lst.row_queries) > 32:
                    lst.row_queries.clear()
                lst.row_queries[key] = cached
            matched = cached
        else:
            matched = list(lst.rows.values())
        page = matched[offset : offset + limit]
        return {
            "rows": [self._read_row(lst, row) for row in page],
            "totalMatched": len(matched),
            "returned": len(page),
            "truncated": offset + len(page) < len(matched),
        }

    @staticmethod
    def _read_row(lst: ListState, row: Row) -> dict[str, Any]:
        cells = {}
        for column_id, value in row.cells.items():
            column = lst.columns[column_id]
            computed = value
            if column.type == "enum":
                computed = next((o.label for o in column.options if o.key == value), value)
            cells[column_id] = {
                "columnId": column_id,
                "rowId": row.id,
                "value": value,
                "computedValue": computed,
                "status": "completed",
            }
        return {"id": row.id, "tableId": lst.id, "updated_at": row.updated_at, "cells": cells}
