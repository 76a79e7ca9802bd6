"""plan_people_sync: the diff of an extract against a List, from hand-built inputs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

from listsync.client.errors import UnexpectedResponseError
from listsync.client.models import ConnectionPath, ListedPerson, Person, person_identity
from listsync.sync.people import PeoplePlan, PlannedWrites, frames, plan_people_sync
from listsync.sync.people.frames import list_frame
from listsync.sync.state import LastApplied


def src(domain: str = "acme.com", **fields: Any) -> tuple[str, dict[str, Any]]:
    return domain, fields


def source(*people: tuple[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """The shape prepare_people gives: account domain -> identity -> person."""
    grouped: dict[str, dict[str, dict[str, Any]]] = {}
    for domain, person in people:
        identity = person_identity(person)
        assert identity is not None
        grouped.setdefault(domain, {})[identity] = person
    return grouped


def listed(domain: str = "acme.com", **fields: Any) -> ListedPerson:
    return ListedPerson.model_validate({"accountDomain": domain, "rowId": "row_1", **fields})


ANN: dict[str, Any] = {"first_name": "Ann", "last_name": "Lee", "email": "ann@acme.com", "title": "CTO"}
BOB: dict[str, Any] = {"first_name": "Bob", "last_name": "Ray", "email": "bob@acme.com"}


def test_new_people_are_added_with_their_non_null_fields() -> None:
    plan = plan_people_sync(source(src(**ANN, bio=None)), [])

    assert [(a.account_domain, a.identity, a.person) for a in plan.adds] == [
        ("acme.com", "email:ann@acme.com", ANN)
    ]
    assert (plan.patches, plan.deletes, plan.unchanged, plan.source_people) == ([], [], 0, 1)


def test_identical_people_are_unchanged() -> None:
    plan = plan_people_sync(source(src(**ANN)), [listed(**ANN, bio="kept: not in the extract")])

    assert plan.size == 0
    assert plan.unchanged == 1


def test_a_patch_holds_only_changed_fields_and_matches_by_the_list_email() -> None:
    plan = plan_people_sync(source(src(**{**ANN, "title": "CEO", "last_name": "Lee"})), [listed(**ANN)])

    [patch] = plan.patches
    assert patch.match == {"email": "ann@acme.com"}
    assert patch.changes == {"title": ("CTO", "CEO")}
    assert patch.patch == {"title": "CEO"}


def test_a_null_in_the_extract_keeps_the_list_value() -> None:
    plan = plan_people_sync(source(src(**{**ANN, "title": None})), [listed(**ANN)])

    assert plan.patches == []
    assert plan.unchanged == 1


def test_overwrite_with_null_erases_the_list_value() -> None:
    plan = plan_people_sync(
        source(src(**{**ANN, "title": None, "bio": None})), [listed(**ANN)], overwrite_with_null=True
    )

    [patch] = plan.patches
    # bio is None on both sides: nothing to erase.
    assert patch.changes == {"title": ("CTO", None)}


def test_writes_go_account_by_account_in_the_order_the_extract_first_names_the_accounts() -> None:
    emails = ["b1@b.com", "a1@a.com", "c1@c.com", "a2@a.com", "b2@b.com"]  # as the extract's rows come
    extract = pd.DataFrame(
        {
            "account_domain": [email.partition("@")[2] for email in emails],
            "identity": [f"email:{email}" for email in emails],
            "email": emails,
        },
        dtype=frames.TEXT,
    )
    current = [listed(email.partition("@")[2], email=email, title="old") for email in emails]

    added = plan_people_sync(extract, [])
    patched = plan_people_sync(extract.assign(title="new"), current)

    order = ["b1@b.com", "b2@b.com", "a1@a.com", "a2@a.com", "c1@c.com"]
    assert [add.person["email"] for add in added.adds] == order
    assert [patch.match["email"] for patch in patched.patches] == order


def test_with_a_state_a_null_still_erases_an_empty_text_the_list_holds() -> None:
    # With a state, pairs whose values' digests are equal are not compared; a digest sees a null
    # and an empty text alike, so an erasing sync compares every pair.
    current = [{"account_domain": "acme.com", **ANN, "title": ""}, {"account_domain": "acme.com", **BOB}]
    plan = plan_people_sync(
        source(src(**{**ANN, "title": None}), src(**{**BOB, "title": "CFO"})),
        current,
        overwrite_with_null=True,
        last_applied=LastApplied(None, now=0.0, visibility_window=60.0),
    )

    assert [(p.identity, p.changes) for p in plan.patches] == [
        ("email:ann@acme.com", {"title": ("", None)}),
        ("email:bob@acme.com", {"title": (None, "CFO")}),
    ]


def test_fields_the_extract_does_not_carry_are_never_touched() -> None:
    plan = plan_people_sync(
        source(src(email="ann@acme.com", first_name="Ann")), [listed(**ANN)], overwrite_with_null=True
    )

    assert plan.size == 0


def test_the_list_side_is_normalised_for_matching() -> None:
    plan = plan_people_sync(
        source(src(**ANN), src(first_name="Cy", network_profile_url="https://www.example.com/in/cy")),
        [
            listed("HTTPS://WWW.Acme.COM/", **{**ANN, "email": "Ann@ACME.com"}),
            listed("acme.com", first_name="Cy", network_profile_url="http://WWW.Example.com/in/cy/?trk=1"),
        ],
    )

    assert (plan.adds, plan.unchanged) == ([], 0)
    # Both are found; the List converges to the extract's normal form, each found by the List's spelling.
    assert [(p.match, p.changes) for p in plan.patches] == [
        ({"email": "Ann@ACME.com"}, {"email": ("Ann@ACME.com", "ann@acme.com")}),
        (
            {"network_profile_url": "http://WWW.Example.com/in/cy/?trk=1"},
            {"network_profile_url": ("http://WWW.Example.com/in/cy/?trk=1", "https://www.example.com/in/cy")},
        ),
    ]


def test_an_extract_email_finds_a_list_person_known_by_profile_url() -> None:
    url = "https://www.example.com/in/ann"
    plan = plan_people_sync(
        source(src(**ANN, network_profile_url=url)),
        [listed(first_name="Ann", last_name="Lee", title="CTO", network_profile_url=url)],
        mode="mirror",
    )

    assert (plan.adds, plan.deletes) == ([], [])
    [patch] = plan.patches
    assert patch.match == {"network_profile_url": url}
    assert patch.patch == {"email": "ann@acme.com"}


def test_people_on_other_accounts_do_not_match() -> None:
    plan = plan_people_sync(source(src("other.com", **ANN)), [listed("acme.com", **ANN)], mode="mirror")

    assert [a.account_domain for a in plan.adds] == ["other.com"]
    assert plan.deletes == []  # acme.com is not in the extract


def test_upsert_never_deletes() -> None:
    plan = plan_people_sync(source(src(**ANN)), [listed(**ANN), listed(**BOB)])

    assert plan.deletes == []


def test_mirror_deletes_within_accounts_in_source_by_identity() -> None:
    current = [listed(**ANN), listed(**BOB), listed("beta.io", first_name="Zed", last_name="Orr")]

    plan = plan_people_sync(source(src(**ANN)), current, mode="mirror")

    assert [(d.account_domain, d.identity, d.match) for d in plan.deletes] == [
        ("acme.com", "email:bob@acme.com", {"email": "bob@acme.com"})
    ]


def test_mirror_with_list_scope_deletes_everywhere() -> None:
    current = [
        listed(**ANN),
        listed("beta.io", first_name="Zed", last_name="Orr"),
        listed("beta.io", first_name="Yan", phone_number="+14155550100"),
    ]

    plan = plan_people_sync(source(src(**ANN)), current, mode="mirror", delete_scope="list")

    assert [(d.identity, d.match) for d in plan.deletes] == [
        ("name:Zed Orr", {"first_name": "Zed", "last_name": "Orr"}),
        ("phone:+14155550100", {"phone_number": "+14155550100"}),
    ]


def test_an_extra_copy_is_not_removed_by_a_phone_another_person_of_the_account_has() -> None:
    bob = {"first_name": "Bob", "phone_number": "+14155550100"}
    ann = {**ANN, "phone_number": "+14155550100"}  # Bob's phone: a delete by it reaches her
    current = [listed(**bob), listed(**bob), listed(**ann)]

    plan = plan_people_sync(source(src(**bob), src(**ann)), current, mode="mirror")

    assert (len(plan.repairs), len(plan.deletes), plan.deletes_held) == (0, 0, 1)
    assert [(held.identity, held.action) for held in plan.held] == [("phone:+14155550100", "delete")]


def test_list_duplicates_are_left_alone_and_block_their_extract_person() -> None:
    current = [listed(**ANN), listed(**{**ANN, "email": "ANN@acme.com", "title": "VP"}), listed(**BOB)]

    plan = plan_people_sync(source(src(**{**ANN, "title": "CEO"})), current, mode="mirror")

    assert plan.list_duplicates == 2
    assert plan.conflicts == 1
    assert plan.adds == [] and plan.patches == []
    assert [d.identity for d in plan.deletes] == ["email:bob@acme.com"]


def test_list_people_without_identity_are_counted_not_deleted() -> None:
    plan = plan_people_sync(source(src(**ANN)), [listed(**ANN), listed(first_name="Solo")], mode="mirror")

    assert plan.list_unidentified == 1
    assert plan.current_people == 2
    assert plan.deletes == []


def test_models_and_connection_paths_compare_as_json() -> None:
    path = {"userId": "usr_1", "source": "network", "degree": "1st"}
    person = Person.model_validate({**ANN, "connection_paths": [path], "personas": ["champion"]})
    current = [listed(**ANN, connection_paths=[{**path, "context": None}], personas=["champion"])]

    same = plan_people_sync({"acme.com": {"email:ann@acme.com": person}}, current)
    moved = person.model_copy(
        update={"connection_paths": [ConnectionPath.model_validate({**path, "degree": "2nd"})]}
    )
    changed = plan_people_sync({"acme.com": {"email:ann@acme.com": moved}}, current)

    assert same.unchanged == 1, same.patches
    [patch] = changed.patches
    assert patch.patch == {"connection_paths": [{**path, "degree": "2nd"}]}


def test_plan_entries_describe_every_action() -> None:
    plan = plan_people_sync(
        source(src(**{**ANN, "title": "CEO"}), src(**BOB)),
        [listed(**ANN), listed(first_name="Cy", last_name="Doe")],
        mode="mirror",
    )

    assert list(plan.entries()) == [
        {
            "action": "add",
            "account_domain": "acme.com",
            "identity": "email:bob@acme.com",
            "changes": {name: {"before": None, "after": value} for name, value in BOB.items()},
        },
        {
            "action": "patch",
            "account_domain": "acme.com",
            "identity": "email:ann@acme.com",
            "match": {"email": "ann@acme.com"},
            "changes": {"title": {"before": "CTO", "after": "CEO"}},
        },
        {
            "action": "delete",
            "account_domain": "acme.com",
            "identity": "name:Cy Doe",
            "match": {"first_name": "Cy", "last_name": "Doe"},
        },
    ]


def test_every_source_person_is_accounted_for() -> None:
    people = source(src(**ANN), src(**{**BOB, "title": "x"}), src(email="new@acme.com", first_name="N"))
    plan: PeoplePlan = plan_people_sync(people, [listed(**ANN), listed(**BOB)])

    assert plan.source_people == len(plan.adds) + len(plan.patches) + plan.unchanged + plan.conflicts == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"mode": "sync"}, "mode must be one of upsert, mirror"), ({"delete_scope": "all"}, "delete_scope")],
)
def test_unknown_options_are_clear_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_people_sync({}, [], **kwargs)


def test_mapped_fields_missing_from_a_person_are_nulls() -> None:
    # prepare_people leaves missing values out of the Person; the column map says they were there.
    people = source(src(email="ann@acme.com", first_name="Ann"))

    kept = plan_people_sync(people, [listed(**ANN)], fields=["email", "first_name", "title"])
    erased = plan_people_sync(
        people, [listed(**ANN)], fields=["email", "first_name", "title"], overwrite_with_null=True
    )

    assert kept.unchanged == 1
    assert [p.changes for p in erased.patches] == [{"title": ("CTO", None)}]


def test_planned_writes_read_like_a_list_of_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PlannedWrites, "BATCH", 2)  # several batches for five writes
    people = [src(email=f"p{n}@acme.com", first_name=f"P{n}") for n in range(5)]
    adds = plan_people_sync(source(*people), []).adds
    every = list(adds)

    assert len(adds) == 5 and [add.identity for add in every] == [f"email:p{n}@acme.com" for n in range(5)]
    assert (adds[0], adds[-1], adds[4]) == (every[0], every[4], every[4])
    assert adds[1:4] == every[1:4] and adds[::2] == every[::2] and adds[3:1] == []
    assert adds == every and adds != every[:4]
    with pytest.raises(IndexError):
        adds[5]


def test_a_field_no_list_person_holds_is_left_out_of_its_columns_and_planned_as_null() -> None:
    current = [listed(**BOB), listed(email="cy@acme.com", first_name="Cy")]  # no title, phone, URL
    extract = source(src(**{**BOB, "title": "CFO"}), src(email="dee@acme.com", first_name="Dee"))

    columns = list_frame(current).frame.columns
    plan = plan_people_sync(extract, current, mode="mirror")

    assert {"title", "phone_number", "url_key", "bio"}.isdisjoint(columns) and "email" in columns
    [patch] = plan.patches
    assert (patch.match, patch.changes) == ({"email": "bob@acme.com"}, {"title": (None, "CFO")})
    assert [delete.identity for delete in plan.deletes] == ["email:cy@acme.com"]
    assert [add.identity for add in plan.adds] == ["email:dee@acme.com"]


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("first_name", 5, "Expected bytes, got a 'int' object"),
        ("email", {"address": "ann@acme.com"}, "Expected bytes, got a 'dict' object"),
        ("target", "yes", "Could not convert 'yes'"),
    ],
)
def test_a_list_person_whose_field_has_the_wrong_type_is_refused_as_the_services_error(
    field: str, value: Any, says: str
) -> None:
    people = [
        {"accountDomain": "acme.com", "email": f"p{number}@acme.com", "first_name": "P"}
        for number in range(5)
    ]
    people[3][field] = value

    with pytest.raises(UnexpectedResponseError, match="cannot read a List person") as error:
        list_frame(people)

    assert says in str(error.value)
    assert error.value.status == 200


def test_a_list_read_in_batches_keeps_its_order_and_stops_soon_after_a_bad_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(frames, "BATCH", 2)
    people = [{"accountDomain": "acme.com", "email": f"p{n}@acme.com", "first_name": "P"} for n in range(7)]

    assert list(list_frame(people).frame["email"]) == [person["email"] for person in people]

    people[1]["first_name"] = 5
    taken: list[dict[str, Any]] = []

    def read() -> Iterator[dict[str, Any]]:
        for person in people:
            taken.append(person)
            yield person

    with pytest.raises(UnexpectedResponseError, match="Expected bytes"):
        list_frame(read())
    assert len(taken) <= 2 * frames.BATCH  # the bad batch, and at most the one read beside it


def test_writes_without_some_keep_the_columns_they_are_made_of_beside_them() -> None:
    """The read back takes a plan's adds as columns: once adds are dropped (people found after
    all), the columns must still be those of the adds left, row for row."""
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame({"identity": ["email:a@x.io", "email:b@x.io", "email:c@x.io", "email:d@x.io"]})
    writes: PlannedWrites[Any] = PlannedWrites(
        4, lambda start, stop: frame["identity"][start:stop].tolist(), frame
    )

    kept = writes.without(np.array([1, 2]))

    assert list(kept) == ["email:a@x.io", "email:d@x.io"]
    assert kept.frame is not None and kept.frame["identity"].tolist() == list(kept)
