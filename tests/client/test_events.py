"""send_events against the emulator, which enforces per-signal fixed windows (``event_service``).

A test that needs an answer the emulator never gives changes the emulator's answer in its own
MockTransport handler, which says why.
"""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest

from listsync.client import AuthenticationError, ServerError, UnexpectedResponseError
from listsync.signals.sender import send_events, stream_events


def events(signal: str, count: int, **extra: object) -> list[dict[str, object]]:
    return [
        {"signal": signal, "identity": {"type": "account", "id": f"acc-{i}"}, **extra} for i in range(count)
    ]


def assert_no_request_over_budget(service) -> None:
    per_window: Counter[tuple[str, int]] = Counter()
    for call in service.calls:
        for slug, count in call.sent.items():
            per_window[(slug, call.window)] += count
    for (slug, window), count in per_window.items():
        assert count <= service.limits[slug], (slug, window, count)


def test_250_state_events_take_nine_windows_without_exceeding_budget(make_client, event_service, fake_clock):
    service = event_service({"state_sig": 30})
    client = make_client(service.handler)

    report = send_events(client, events("state_sig", 250), {"state_sig": "State"})

    assert report.signals["state_sig"].acknowledged == 250
    assert sorted(service.ingested) == sorted(f"state_sig:{i}" for i in range(250))
    assert len({call.window for call in service.calls}) == 9
    assert all(call.status == 200 for call in service.calls)
    assert not any(call.sent != call.accepted for call in service.calls)  # nothing was refused
    assert_no_request_over_budget(service)
    assert report.signals["state_sig"].rate_limited_responses == 0
    assert report.seconds_waited == pytest.approx(8 * 60)


def test_mixed_signal_types_progress_in_parallel(make_client, event_service):
    service = event_service({"evt": 100, "met": 1000, "st": 30})
    client = make_client(service.handler)
    mixed = events("evt", 150) + events("met", 1500) + events("st", 45)

    report = send_events(client, mixed, {"evt": "Event", "met": "Metric", "st": "State"})

    first_window = service.calls[0].window
    accepted_first: Counter[str] = Counter()
    for call in service.calls:
        if call.window == first_window:
            accepted_first.update(call.accepted)
    # Each signal used its whole budget in the first window: throughput is the sum of the limits.
    assert accepted_first == Counter({"evt": 100, "met": 1000, "st": 30})
    assert len({call.window for call in service.calls}) == 2
    assert any(len(call.sent) > 1 for call in service.calls)  # batches mix signals
    assert all(sum(call.sent.values()) <= 100 for call in service.calls)
    assert {slug: r.acknowledged for slug, r in report.signals.items()} == {"evt": 150, "met": 1500, "st": 45}
    assert_no_request_over_budget(service)


def test_partial_rate_limited_events_are_resent_until_acknowledged_none_lost_or_doubled(
    make_client, event_service
):
    # The service allows less than the declared type says (another client shares the signal).
    service = event_service({"evt": 40})
    client = make_client(service.handler)

    report = send_events(client, events("evt", 130), {"evt": "Event"})

    assert any(call.sent != call.accepted for call in service.calls)  # partial responses happened
    assert Counter(service.ingested) == Counter(f"evt:{i}" for i in range(130))  # each exactly once
    signal = report.signals["evt"]
    assert signal.acknowledged == 130
    assert len(set(signal.ack_ids)) == 130
    assert signal.rate_limited_resends > 0
    assert report.pending == 0


def test_rate_limited_entries_without_reference_are_still_requeued(make_client, event_service):
    service = event_service({"evt": 40}, rate_limited_reference=False)
    client = make_client(service.handler)

    report = send_events(client, events("evt", 90), {"evt": "Event"})

    assert Counter(service.ingested) == Counter(f"evt:{i}" for i in range(90))
    assert report.signals["evt"].acknowledged == 90


def test_rate_limited_entries_whose_reference_matches_no_event_count_as_unreferenced(
    make_client, event_service
):
    # A service that reshapes references (here: upper case) still says these events were limited:
    # they are re-queued for the next window, not taken for possibly ingested and re-sent at once.
    service = event_service({"evt": 40})

    def reshape_references(request: httpx.Request) -> httpx.Response:
        """The emulator's answer with references reshaped and no rate-limit headers, which it never gives."""
        answer = service.handler(request)
        body = answer.json()
        for entry in body.get("rate_limited", []):
            entry["reference"] = entry["reference"].upper()
        return httpx.Response(answer.status_code, json=body)

    report = send_events(make_client(reshape_references), events("evt", 90), {"evt": "Event"})

    assert Counter(service.ingested) == Counter(f"evt:{i}" for i in range(90))
    assert report.signals["evt"].acknowledged == 90
    assert report.signals["evt"].possibly_duplicated == 0
    assert [call.status for call in service.calls] == [200, 200, 200]


def test_events_missing_from_a_response_are_resent_and_flagged(make_client, event_service, fake_clock):
    service = event_service({"evt": 100})

    def drop_last_ack(request: httpx.Request) -> httpx.Response:
        """The emulator's answer missing an acknowledgement, which it never leaves out."""
        answer = service.handler(request)
        body = answer.json()
        if len(body["data"]) > 1:
            body["data"] = body["data"][:-1]  # the service ingested it but did not say so
        return httpx.Response(200, json=body, headers=answer.headers)

    report = send_events(make_client(drop_last_ack), events("evt", 3), {"evt": "Event"})

    assert report.signals["evt"].acknowledged == 3
    assert report.signals["evt"].possibly_duplicated == 1
    assert Counter(service.ingested)["evt:2"] == 2
    assert fake_clock.slept == []  # not rate limited: re-sent at once


@pytest.mark.parametrize("answer", [{}, {"success": True, "data": []}, None])
def test_a_batch_answer_that_settles_no_event_is_an_error_not_an_endless_resend(make_client, answer):
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) > 3:
            raise AssertionError("the same events are sent again and again")
        if answer is None:
            return httpx.Response(202)
        return httpx.Response(200, json=answer)

    with pytest.raises(UnexpectedResponseError, match="no event"):
        send_events(make_client(handler), events("evt", 3), {"evt": "Event"})
    assert len(calls) == 1


def test_a_429_waits_until_the_reset_header(make_client, event_service, fake_clock):
    service = event_service({"st": 30})
    service.spend("st")  # window already spent by someone else
    client = make_client(service.handler)
    fake_clock.now += 15  # mid-window

    report = send_events(client, events("st", 5), {"st": "State"})

    assert service.calls[0].status == 429
    assert sum(fake_clock.slept) == pytest.approx(45.0)  # exactly to the window reset, in 10 s steps
    assert service.calls[1].time == pytest.approx(service.calls[0].time + 45)
    assert report.signals["st"].rate_limited_responses == 1
    assert report.signals["st"].acknowledged == 5


def test_unknown_signals_are_rejected_with_the_message_and_the_rest_sent(make_client, event_service):
    service = event_service({"good": 100})
    client = make_client(service.handler)

    types = {"good": "Event", "ghost": "Event", "gone": "Metric"}

    report = send_events(client, events("good", 3) + events("ghost", 2) + events("gone", 1), types)

    assert report.signals["good"].acknowledged == 3
    assert report.signals["ghost"].rejected == {
        "ghost:0": "Signals not found: ghost, gone",
        "ghost:1": "Signals not found: ghost, gone",
    }
    assert report.signals["gone"].rejected == {"gone:0": "Signals not found: ghost, gone"}
    assert sorted(service.ingested) == ["good:0", "good:1", "good:2"]


def test_a_timed_out_batch_is_resent_and_counted_possibly_duplicated(make_client, event_service):
    service = event_service({"evt": 100})
    calls = 0

    def first_answer_lost(request: httpx.Request) -> httpx.Response:
        """The emulator's answers, the first lost to a timeout after it applied the batch, which an
        answer it gives cannot be."""
        nonlocal calls
        calls += 1
        answer = service.handler(request)  # the service did ingest it
        if calls == 1:
            raise httpx.ReadTimeout("timed out", request=request)
        return answer

    client = make_client(first_answer_lost)

    report = send_events(client, events("evt", 10), {"evt": "Event"})

    assert report.signals["evt"].acknowledged == 10
    assert report.signals["evt"].possibly_duplicated == 10
    assert len(service.ingested) == 20  # sent twice: a duplicate, never a loss
    # Distinct events acknowledged, HTTP requests sent: the retry counts.
    assert (report.acknowledged, report.requests, report.signals["evt"].requests) == (10, 2, 2)


def test_caller_references_are_kept_and_missing_ones_are_deterministic(make_client, event_service):
    service = event_service({"evt": 100})
    client = make_client(service.handler)
    batch = events("evt", 3)
    batch[1]["reference"] = "crm-42"

    send_events(client, batch, {"evt": "Event"})

    assert service.calls[0].references == ["evt:0", "crm-42", "evt:2"]


def test_a_derived_reference_never_takes_a_reference_the_caller_gave(make_client, event_service):
    # The caller's own references look like derived ones; each event is still sent exactly once.
    service = event_service({"evt": 100})
    batch = events("evt", 4)
    batch[0]["reference"] = "evt:1"
    batch[3]["reference"] = "evt:2"

    report = send_events(make_client(service.handler), batch, {"evt": "Event"})

    assert report.signals["evt"].rejected == {}
    assert report.signals["evt"].acknowledged == 4
    references = service.calls[0].references
    assert references[0] == "evt:1" and references[3] == "evt:2"
    assert len(set(references)) == 4
    assert report.checkpoint == {"version": 1, "signals": {"evt": {"prefix": 4, "ranges": []}}}


def test_invalid_and_duplicate_reference_events_are_rejected_not_sent(make_client, event_service):
    service = event_service({"evt": 100})
    client = make_client(service.handler)
    batch = [*events("evt", 2, reference="same"), {"signal": "evt", "identity": {"type": "account"}}]

    report = send_events(client, batch, {"evt": "Event"})

    rejected = report.signals["evt"].rejected
    assert rejected["same"] == "duplicate reference"
    assert "identity.id" in rejected["evt:2"]
    assert service.ingested == ["same"]


def test_checkpoint_records_acknowledged_prefix_and_a_resumed_run_skips_it(
    make_client, event_service, fake_clock
):
    service = event_service({"st": 30})
    client = make_client(service.handler)
    saved: list[dict] = []
    start = fake_clock()  # the start of a window

    first = send_events(client, events("st", 70), {"st": "State"}, on_checkpoint=saved.append, max_wait=5)

    assert first.resume_at == pytest.approx(start + 60)
    assert first.pending == 40
    assert saved[-1] == {"version": 1, "signals": {"st": {"prefix": 30, "ranges": []}}}
    json.dumps(first.to_dict())  # JSON-friendly
    assert first.to_dict()["resume_at_iso"].startswith("2027-01-15T")

    second = send_events(client, events("st", 70), {"st": "State"}, checkpoint=saved[-1])

    assert second.signals["st"].skipped == 30
    assert second.signals["st"].acknowledged == 40
    assert second.checkpoint == {"version": 1, "signals": {"st": {"prefix": 70, "ranges": []}}}
    assert Counter(service.ingested) == Counter(f"st:{i}" for i in range(70))


def test_a_batch_in_flight_when_the_run_dies_is_in_doubt_and_reported_when_resent(make_client, event_service):
    # The service applies the second batch, then the process dies before its answer is read: the
    # checkpoint saved before the send marks that batch possibly applied, and the resumed run
    # counts it possibly duplicated (it is: the service now holds it twice).
    service = event_service({"evt": 100})
    calls = 0

    def dies_after_applying_the_second_batch(request: httpx.Request) -> httpx.Response:
        """The emulator's answers until the process dies between the emulator applying the second
        batch and its answer being read, which no answer of the emulator can play."""
        nonlocal calls
        calls += 1
        answer = service.handler(request)
        if calls == 2:
            raise SystemExit("killed")
        return answer

    saved: list[dict] = []
    with pytest.raises(SystemExit):
        send_events(
            make_client(dies_after_applying_the_second_batch),
            events("evt", 30),
            {"evt": "Event"},
            batch_size=10,
            on_checkpoint=saved.append,
        )
    assert saved[-1] == {"version": 1, "signals": {"evt": {"prefix": 10, "ranges": [], "maybe": [[10, 20]]}}}

    resumed = send_events(
        make_client(service.handler), events("evt", 30), {"evt": "Event"}, batch_size=10, checkpoint=saved[-1]
    )

    twice = sum(count - 1 for count in Counter(service.ingested).values())
    assert (resumed.signals["evt"].possibly_duplicated, twice) == (10, 10)
    assert resumed.checkpoint == {
        "version": 1,
        "signals": {"evt": {"prefix": 30, "ranges": [], "twice": [[10, 20]]}},
    }


def test_a_batch_the_service_refused_whole_is_not_left_in_doubt(make_client, event_service):
    service = event_service({"st": 30})
    service.spend("st")  # spent by another sender: the batch meets a 429
    saved: list[dict] = []

    send_events(make_client(service.handler), events("st", 5), {"st": "State"}, on_checkpoint=saved.append)

    in_flight = {"version": 1, "signals": {"st": {"prefix": 0, "ranges": [], "maybe": [[0, 5]]}}}
    # Sent (in doubt), refused by the 429 (settled, nothing applied), sent again, acknowledged.
    assert saved == [
        in_flight,
        {"version": 1, "signals": {}},
        in_flight,
        {"version": 1, "signals": {"st": {"prefix": 5, "ranges": []}}},
    ]


def test_checkpoint_keeps_acknowledged_events_beyond_a_gap(make_client, event_service):
    service = event_service({"evt": 100})
    client = make_client(service.handler)
    batch = events("evt", 5)
    batch[2]["timestamp"] = "not a time"  # rejected: leaves a gap in the acknowledged prefix

    first = send_events(client, batch, {"evt": "Event"})

    assert first.checkpoint == {"version": 1, "signals": {"evt": {"prefix": 2, "ranges": [[3, 5]]}}}

    batch[2]["timestamp"] = "2026-11-21T06:00:00Z"
    second = send_events(client, batch, {"evt": "Event"}, checkpoint=first.checkpoint)

    assert second.signals["evt"].skipped == 4
    assert service.calls[-1].references == ["evt:2"]
    assert second.checkpoint == {"version": 1, "signals": {"evt": {"prefix": 5, "ranges": []}}}


def test_max_wait_returns_early_leaving_events_unsent(make_client, event_service, fake_clock):
    service = event_service({"st": 30})
    client = make_client(service.handler)

    start = fake_clock()

    report = send_events(client, events("st", 31), {"st": "State"}, max_wait=10)

    assert fake_clock.slept == []
    assert report.pending == 1
    assert report.resume_at == pytest.approx(start + 60)
    assert len(service.ingested) == 30


def test_unknown_signal_type_is_probed_then_paced_from_headers(make_client, event_service):
    service = event_service({"mystery": 50})
    client = make_client(service.handler)

    report = send_events(client, events("mystery", 120))

    assert service.calls[0].sent == Counter({"mystery": 1})  # a probe first, alone
    assert report.signals["mystery"].acknowledged == 120
    assert report.signals["mystery"].rate_limited_resends == 0  # headers told the limit
    assert_no_request_over_budget(service)


def test_a_bad_event_refusing_its_batch_is_isolated(make_client, event_service):
    service = event_service({"evt": 100})

    def refuse_bad(request: httpx.Request) -> httpx.Response:
        """A 400 for the batch holding evt:1 that names no event in it, which the emulator never gives."""
        if any(event.get("reference") == "evt:1" for event in json.loads(request.content)["events"]):
            error = "Missing required data keys for signal evt: x"
            return httpx.Response(400, json={"success": False, "error": error})
        return service.handler(request)

    client = make_client(refuse_bad)

    report = send_events(client, events("evt", 3), {"evt": "Event"})

    assert report.signals["evt"].acknowledged == 2
    assert report.signals["evt"].rejected == {"evt:1": "Missing required data keys for signal evt: x"}


def test_an_event_refused_with_a_400_costs_no_rate_limit_budget(make_client, event_service, fake_clock):
    # A4: a refused request counts against no limit, so a bad probe of a signal of unknown type
    # must not hold the next probe back until the window resets.
    service = event_service({"mystery": 50})

    def refuse_first(request: httpx.Request) -> httpx.Response:
        """A 400 for the batch holding mystery:0 that names no event in it, which the emulator never
        gives."""
        if any(event.get("reference") == "mystery:0" for event in json.loads(request.content)["events"]):
            error = "Missing required data keys for signal mystery: x"
            return httpx.Response(400, json={"success": False, "error": error})
        return service.handler(request)

    report = send_events(make_client(refuse_first), events("mystery", 3))

    assert report.signals["mystery"].rejected == {
        "mystery:0": "Missing required data keys for signal mystery: x"
    }
    assert report.signals["mystery"].acknowledged == 2
    assert fake_clock.slept == []


def test_a_batch_error_naming_an_event_rejects_it_and_resends_the_rest(make_client, event_service):
    service = event_service({"evt": 100})
    refused = []

    def refuse_indexed(request: httpx.Request) -> httpx.Response:
        """The emulator's refusal of an event with a bad timestamp, for evt:2, whose timestamp is good:
        the client does not send one it can tell is bad."""
        sent = json.loads(request.content)["events"]
        for index, event in enumerate(sent):
            if event["reference"] == "evt:2":
                refused.append(len(sent))
                error = f"events[{index}]: timestamp must be an ISO 8601 string"
                return httpx.Response(400, json={"success": False, "error": error})
        return service.handler(request)

    report = send_events(make_client(refuse_indexed), events("evt", 5), {"evt": "Event"})

    assert refused == [5]  # refused once, as a whole batch
    assert report.signals["evt"].rejected == {"evt:2": "events[2]: timestamp must be an ISO 8601 string"}
    assert sorted(service.ingested) == ["evt:0", "evt:1", "evt:3", "evt:4"]
    assert report.requests == 2


def test_authentication_failure_is_raised(make_client):
    client = make_client(
        lambda request: httpx.Response(401, json={"success": False, "error": "Invalid API key"})
    )

    with pytest.raises(AuthenticationError):
        send_events(client, events("evt", 1), {"evt": "Event"})


def test_report_dict_is_json_with_every_per_signal_figure(make_client, event_service):
    service = event_service({"evt": 100})
    client = make_client(service.handler)

    summary = send_events(client, events("evt", 2), {"evt": "Event"}).to_dict()

    ack_ids = [event["id"] for event in service.emulator.state.events]
    assert len(ack_ids) == 2
    assert json.loads(json.dumps(summary))["signals"]["evt"] == {
        "acknowledged": 2,
        "ack_ids": ack_ids,
        "rejected": {},
        "rate_limited_resends": 0,
        "requests": 1,
        "rate_limited_responses": 0,
        "seconds_waited": 0.0,
        "possibly_duplicated": 0,
        "skipped": 0,
    }


def test_a_429_on_a_mixed_batch_counts_once_for_the_run_and_once_for_each_signal(
    make_client, event_service, fake_clock
):
    service = event_service({"a": 30, "b": 30})
    service.spend("a", "b")
    client = make_client(service.handler)

    report = send_events(client, events("a", 2) + events("b", 2), {"a": "State", "b": "State"})

    assert [call.status for call in service.calls].count(429) == 1
    assert report.rate_limited_responses == 1
    assert report.signals["a"].rate_limited_responses == 1
    assert report.signals["b"].rate_limited_responses == 1
    assert report.to_dict()["rate_limited_responses"] == 1
    assert report.acknowledged == 4


def test_possible_duplicates_survive_a_crash_of_the_try_that_made_them(make_client, event_service):
    # Try 1: the first batch is applied but its answer lost, so it is sent again (possibly twice);
    # then a 500 ends the try. Try 2 resumes: the count is in the checkpoint, not lost with try 1.
    service = event_service({"evt": 100})
    calls = 0

    def lost_then_failed(request: httpx.Request) -> httpx.Response:
        """The emulator's answers, but the first lost to a timeout after the emulator applied the
        batch and the third a 500, a sequence its faults cannot place."""
        nonlocal calls
        calls += 1
        if calls == 1:
            service.handler(request)
            raise httpx.ReadTimeout("timed out", request=request)
        if calls == 3:
            return httpx.Response(500, json={"success": False, "error": "boom"})
        return service.handler(request)

    saved: list[dict] = []
    with pytest.raises(ServerError):
        send_events(
            make_client(lost_then_failed),
            events("evt", 30),
            {"evt": "Event"},
            batch_size=10,
            on_checkpoint=saved.append,
        )
    resumed = send_events(
        make_client(service.handler), events("evt", 30), {"evt": "Event"}, batch_size=10, checkpoint=saved[-1]
    )

    twice = sum(count - 1 for count in Counter(service.ingested).values())
    stored_twice = resumed.checkpoint["signals"]["evt"]["twice"]
    assert twice == 10
    # Possibly twice: the batch whose answer was lost, and the one the 500 left in doubt.
    assert stored_twice == [[0, 20]]


def test_a_429_after_a_lost_answer_leaves_the_events_in_doubt(make_client, event_service):
    # The first send is applied and its answer lost; the resend meets a 429: that refusal does
    # not undo the first send, so the events stay possibly applied.
    service = event_service({"evt": 100})
    calls = 0

    def lost_then_limited(request: httpx.Request) -> httpx.Response:
        """The emulator's answers, but the first lost to a timeout after the emulator applied the
        batch and the second a bare 429, a sequence its faults cannot place."""
        nonlocal calls
        calls += 1
        if calls == 1:
            service.handler(request)
            raise httpx.ReadTimeout("timed out", request=request)
        if calls == 2:
            return httpx.Response(
                429,
                json={"success": False, "error": "Rate limit exceeded for all events in batch"},
                headers={"Retry-After": "1"},
            )
        return service.handler(request)

    saved: list[dict] = []
    report = send_events(
        make_client(lost_then_limited), events("evt", 10), {"evt": "Event"}, on_checkpoint=saved.append
    )

    after_429 = saved[1]
    assert after_429["signals"]["evt"]["maybe"] == [[0, 10]]
    assert report.signals["evt"].possibly_duplicated == 10
    assert sum(count - 1 for count in Counter(service.ingested).values()) == 10


def test_an_answer_whose_window_has_already_ended_does_not_stall_the_signal():
    # The answer describes a window that ended as it arrived (its reset rounded down to the
    # millisecond): the signal's next window has begun, and it goes on at once rather than
    # waiting for a minute's fallback.
    from listsync.client.rate_hints import RateLimitInfo, SignalBudget

    budget = SignalBudget(30)
    budget.spend(30, now=100.0)
    budget.observe(RateLimitInfo(limit=30, remaining=0, reset_at=100.4), now=100.4)

    assert (budget.available(100.4), budget.next_open(100.4)) == (30, 100.4)


# -- stream_events: events read as they are sent ----------------------------------------------------


def test_streamed_events_are_read_as_they_are_sent_and_few_wait_unsent(make_client, event_service):
    service = event_service({"evt": 100, "st": 30})
    client = make_client(service.handler)
    waiting: list[int] = []

    def source():
        for i in range(600):
            # Read so far minus settled: what the sender holds when it asks for this one.
            waiting.append(i - len(service.ingested))
            signal = "st" if i % 3 == 0 else "evt"
            yield {"signal": signal, "identity": {"type": "account", "id": f"a{i}"}, "reference": f"r{i}"}

    report = stream_events(client, source(), {"evt": "Event", "st": "State"}, max_queued=50)

    assert report.acknowledged == 600 and report.pending == 0
    assert Counter(service.ingested) == Counter(f"r{i}" for i in range(600))
    assert max(waiting) <= 50
    # Each signal's events went out in the order they were read.
    for signal, step in (("st", lambda i: i % 3 == 0), ("evt", lambda i: i % 3 != 0)):
        sent = [int(ref[1:]) for ref in service.ingested if step(int(ref[1:]))]
        assert sent == sorted(sent), signal
    assert report.signals["evt"].ack_ids == []  # one id per event would grow with the events


def test_a_streamed_run_that_returns_early_reads_the_rest_to_count_it(make_client, event_service, fake_clock):
    service = event_service({"st": 30})
    client = make_client(service.handler)
    read = []

    def source():
        for i in range(100):
            read.append(i)
            yield {"signal": "st", "identity": {"type": "account", "id": f"a{i}"}, "reference": f"r{i}"}

    report = stream_events(client, source(), {"st": "State"}, max_queued=10, max_wait=5)

    assert report.acknowledged == 30
    assert report.pending == 70
    assert len(read) == 100
    assert report.checkpoint == {"version": 1, "signals": {"st": {"prefix": 30, "ranges": []}}}


def test_streamed_events_of_an_unknown_signal_are_refused_once_then_rejected_as_read(
    make_client, event_service
):
    service = event_service({"evt": 100})
    refusals = []

    def handler(request: httpx.Request) -> httpx.Response:
        response = service.handler(request)
        refusals.append(response.status_code == 404)
        return response

    client = make_client(handler)
    source = (
        {
            "signal": "nope" if i % 2 else "evt",
            "identity": {"type": "account", "id": "a"},
            "reference": f"r{i}",
        }
        for i in range(400)
    )

    report = stream_events(client, source, {"evt": "Event", "nope": "Event"}, max_queued=20, batch_size=10)

    assert len(report.signals["nope"].rejected) == 200
    assert set(report.signals["nope"].rejected.values()) == {"Signals not found: nope"}
    assert report.signals["evt"].acknowledged == 200
    assert sum(refusals) == 1


def test_the_checkpoint_stays_small_when_an_event_is_never_acknowledged(make_client, event_service):
    service = event_service({"evt": 1000})
    client = make_client(service.handler)
    batch = events("evt", 500)
    batch[3]["identity"] = {"type": "account"}  # invalid: rejected before sending, a gap for good

    report = stream_events(client, batch, {"evt": "Metric"})

    assert report.checkpoint == {"version": 1, "signals": {"evt": {"prefix": 3, "ranges": [[4, 500]]}}}
    resumed = stream_events(client, events("evt", 500), {"evt": "Metric"}, checkpoint=report.checkpoint)
    assert resumed.signals["evt"].skipped == 499
    assert service.ingested.count("evt:3") == 1
