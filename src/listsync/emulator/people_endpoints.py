"""The targetable-people endpoints of a List (spec §4.3–4.6): people checked against §2.1 and kept in
the profile's canonical forms, found by the identity a ``match`` or a DELETE entry names (A17),
merged on add by e-mail or profile URL (A16), and queried with the profile's filter names (A12,
A13). The common ground of the List endpoints is :mod:`~listsync.emulator.lists`'s."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from listsync.emulator.lists import ListOperations
from listsync.emulator.request_checks import bad_request, body_array, body_object, bool_param, int_param
from listsync.emulator.store import ApiError, ListState, Person, Row, normalize_domain
from listsync.emulator.windows import iso_utc

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


def _validate_person(raw: object, path: str, *, partial: bool) -> Person:
    """A Person (spec §2.1) with absent fields dropped; ``partial`` for a PATCH ``patch``.

    In a patch a ``null`` clears an optional field, so it is kept as ``None``.
    """
    person = body_object(raw, path)
    unknown = sorted(set(person) - PERSON_FIELDS)
    if unknown:
        raise bad_request(f"{path}: unknown field {unknown[0]}")
    if not partial or "first_name" in person:
        first = person.get("first_name")
        if not isinstance(first, str) or not first.strip():
            raise bad_request(f"{path}.first_name is required")
    clean: Person = {}
    for name, value in person.items():
        if value is None:
            if partial:
                clean[name] = None
            continue
        where = f"{path}.{name}"
        if name in PERSON_TEXT_FIELDS and not isinstance(value, str):
            raise bad_request(f"{where} must be a string")
        if name == "phone_number" and not E164.fullmatch(value):
            raise bad_request(f"{where} must be E.164: a plus sign followed by digits")
        if name == "target" and not isinstance(value, bool):
            raise bad_request(f"{where} must be a boolean")
        if name == "personas" and not (isinstance(value, list) and all(isinstance(p, str) for p in value)):
            raise bad_request(f"{where} must be an array of strings")
        if name == "connection_paths":
            _validate_connection_paths(value, where)
        clean[name] = value
    return clean


def _validate_connection_paths(value: object, path: str) -> None:
    if not isinstance(value, list):
        raise bad_request(f"{path} must be an array")
    for index, raw in enumerate(value):
        where = f"{path}[{index}]"
        item = body_object(raw, where)
        if not isinstance(item.get("userId"), str) or not item["userId"]:
            raise bad_request(f"{where}.userId is required")
        if item.get("source") not in ("network", "relation"):
            raise bad_request(f"{where}.source must be network or relation")
        if item.get("degree") not in ("1st", "2nd"):
            raise bad_request(f"{where}.degree must be 1st or 2nd")
        if item.get("context") is not None and not isinstance(item["context"], str):
            raise bad_request(f"{where}.context must be a string")


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
        raise bad_request(
            f"{where} must name email, network_profile_url, phone_number, or first_name and last_name"
        )
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


class PeopleEndpoints:
    """The targetable-people endpoints of the Lists :class:`~listsync.emulator.lists.ListOperations`
    finds: add, patch and delete people by account (A14, A16, A17, A19), and the people query."""

    def __init__(self, lists: ListOperations) -> None:
        self._lists = lists
        self._dialect = lists.dialect
        self._caps = lists.dialect.caps
        self._forms = lists.dialect.canonical_forms

    def _accounts(self, lst: ListState, body: Mapping[str, Any]) -> list[_Account]:
        """Validate the ``accounts`` array and find each account's row.

        A domain the List lacks refuses the whole request (A14), unless the profile's
        ``unknown_accounts`` is ``create``: then its row is None.
        """
        accounts: list[_Account] = []
        for index, raw in enumerate(body_array(body, "accounts", self._caps["accounts"])):
            account = body_object(raw, f"accounts[{index}]")
            domain = account.get("accountDomain")
            if not isinstance(domain, str) or not domain.strip():
                raise bad_request(f"accounts[{index}].accountDomain is required")
            people = account.get("people")
            if not isinstance(people, list):
                raise bad_request(f"accounts[{index}].people must be an array")
            row = lst.row_for_domain(domain)
            accounts.append(_Account(domain, row, people, f"accounts[{index}].people"))
        if sum(len(a.people) for a in accounts) > self._caps["people"]:
            raise bad_request(f"Maximum {self._caps['people']} people per request")
        missing = [a.domain for a in accounts if a.row is None]
        # A List without an account column has no accounts: none to create, none to miss.
        accepted = self._dialect.unknown_accounts == "create" and lst.config.account_column is not None
        if missing and not accepted:
            prefix = "Unknown account domain(s)" if self._lists.other_wording else "Account not found"
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
            row = Row(self._lists.state.new_row_id(), {column: domain}, iso_utc(self._lists.clock()))
            lst.rows[row.id] = row
            lst.changed()
        return row

    def add_people(self, lst: ListState, body: Mapping[str, Any]) -> dict[str, int]:
        """POST targetable-people: add, or per ``duplicateStrategy`` update or skip a duplicate."""
        strategy = body.get("duplicateStrategy", "update-existing")
        if strategy not in DUPLICATE_STRATEGIES:
            raise bad_request(f"Invalid duplicateStrategy: {strategy}")
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
                raise bad_request(f"{where}: unsupported key {other}; only email is supported")
            raise bad_request(f"{where}.email is required")
        return _identity(match, where)

    def _matched_changes(self, lst: ListState, body: Mapping[str, Any], *, patching: bool) -> list[_Change]:
        """Validate every PATCH or DELETE entry before any is applied."""
        changes = []
        for account in self._accounts(lst, body):
            for where, raw in account.entries():
                entry = body_object(raw, where)
                # A match is compared in the form people are kept in; notFound echoes it as sent.
                if patching:
                    match = body_object(entry.get("match"), f"{where}.match")
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
        """DELETE targetable-people: remove the person each entry identifies (A17, A19), or, when
        the profile's ``delete_reach`` is ``all``, every person of the account it identifies
        (A38); ``deleted`` counts the people removed."""
        deleted = 0
        not_found = []
        for change in self._matched_changes(lst, body, patching=False):
            row = change.account.row
            person = _find_person(row, change.identity)
            if row is None or person is None:
                not_found.append(change.not_found(lst))
                continue
            if self._dialect.delete_reach == "all":
                kept = [p for p in row.people if not _has_identity(p, change.identity)]
                deleted += len(row.people) - len(kept)
                row.people[:] = kept
                continue
            row.people.remove(person)
            deleted += 1
        lst.people_changed()
        return {"deleted": deleted, "notFound": not_found}

    def query_people(self, lst: ListState, params: Mapping[str, str]) -> dict[str, Any]:
        """GET targetable-people (A12, A13): filtered, ordered by account row then insertion."""
        lst = self._lists.visible(lst)
        # The spec names target and personas; the other filters go by the profile's names, and a
        # parameter it does not name is ignored, as a server ignores what it does not know.
        names = self._dialect.filter_names
        target = bool_param(params, "target")
        contactable = bool_param(params, names["contactable"])
        personas = frozenset(p.strip() for p in params.get("personas", "").split(",") if p.strip())
        search = params.get(names["search"], "").strip().lower()
        domain = params.get(names["account_domain"])
        limit = self._lists.page_size(params)
        offset = int_param(params, "offset", 0, 0, None)
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
