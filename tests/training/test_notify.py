"""The head's hook (training/head/notify.py) against a real HTTP server on loopback: every event arrives in order,
signed with HMAC-SHA256 over the exact body, a failed delivery is retried with the same id, a refusal is said once
in the job's log, posting never waits for the receiver, and --notify-cmd gets the same JSON on its stdin."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.training.notify_receiver import Receiver
from training.head.notify import SIGNATURE_HEADER, Notifier, NotifyKind, signature
from training.shared.guard import SECRET_FILE, NotifyTarget
from training.shared.jobstore import JobStatus
from training.shared.summary import RunSummary

SECRET = b"s3cret-for-the-tests-only"
pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def receiver():
    found = Receiver()
    yield found
    found.close()


def _notifier(target: NotifyTarget, notes: list[str]) -> Notifier:
    return Notifier(target, SECRET, "job-1", "c1", notes.append, pauses_s=(0.01, 0.01), try_timeout_s=2.0)


def _summary() -> RunSummary:
    return RunSummary(
        job_id="job-1",
        cluster="c1",
        status=JobStatus.COMPLETED,
        message="completed",
        step=10,
        total_steps=10,
        started_at="2026-11-25T01:00:00+00:00",
        ended_at="2026-11-25T02:00:00+00:00",
        cost_usd=1.5,
        on_demand_usd=4.0,
        interruptions=2,
        replacements=1,
    )


def test_events_arrive_in_order_signed_over_the_exact_body(receiver):
    notes: list[str] = []
    notifier = _notifier(NotifyTarget(url=receiver.url), notes)
    notifier.controller_event("notice", "Spot interruption notice on trainer-1")
    notifier.controller_event("attempt", "not one a hook hears of")
    notifier.controller_event("replacement", "bought i-2")
    notifier.post(NotifyKind.COMPLETION, "completed: step 10/10", _summary())
    notifier.close(timeout_s=10)
    assert [e["event"] for e in receiver.signed_events(SECRET)] == ["notice", "replacement", "completion"]
    last = receiver.events()[-1]
    assert (last["job_id"], last["cluster"], last["version"]) == ("job-1", "c1", 1)
    assert RunSummary(**{**last["summary"], "status": JobStatus(last["summary"]["status"])}) == _summary()
    assert notes == []
    assert signature(b"other", receiver.posts[0][1]) != receiver.posts[0][0][SIGNATURE_HEADER]


def test_a_server_error_is_retried_with_the_same_id_and_a_refusal_is_said_once(receiver):
    receiver.answers = [503, 500, 200, 404]
    notes: list[str] = []
    notifier = _notifier(NotifyTarget(url=receiver.url), notes)
    notifier.post(NotifyKind.NOTICE, "first")
    notifier.post(NotifyKind.FAILURE, "second")
    notifier.close(timeout_s=10)
    ids = [e["id"] for e in receiver.events()]
    assert ids[:3] == [ids[0]] * 3 and len(ids) == 4 and ids[3] != ids[0]  # 503, 500, then delivered; 404 is final
    assert notes == [f"notify: could not deliver failure to {receiver.url}: HTTP 404"]


def test_posting_never_waits_for_the_receiver(receiver):
    receiver.gate.clear()  # the receiver holds every answer back
    notifier = _notifier(NotifyTarget(url=receiver.url), [])
    for number in range(20):
        notifier.post(NotifyKind.NOTICE, f"notice {number}")
    assert receiver.posts == []  # every post returned while the first delivery still waits for its answer
    receiver.gate.set()
    notifier.close(timeout_s=10)
    assert [e["message"] for e in receiver.events()] == [f"notice {n}" for n in range(20)]


def test_an_unreachable_url_gives_up_after_its_retries_and_says_so():
    notes: list[str] = []
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        port = closed.server_port  # nothing listens there once it is closed
    notifier = _notifier(NotifyTarget(url=f"http://127.0.0.1:{port}/"), notes)
    notifier.post(NotifyKind.AUTODOWN, "going down")
    notifier.close(timeout_s=10)
    assert len(notes) == 1 and notes[0].startswith(f"notify: could not deliver autodown to http://127.0.0.1:{port}/")


def test_the_command_gets_the_json_on_its_stdin_with_the_event_in_its_environment(tmp_path):
    out = tmp_path / "events"
    notifier = _notifier(NotifyTarget(command=f'{{ cat; echo " $DEEPVM_EVENT"; }} >> {out}'), [])
    notifier.post(NotifyKind.STOPPED, "stopped at its time limit")
    notifier.post(NotifyKind.AUTODOWN, "job job-1 stopped")
    notifier.close(timeout_s=10)
    lines = out.read_text().splitlines()
    assert [line.rsplit(" ", 1)[1] for line in lines] == ["stopped", "autodown"]
    assert json.loads(lines[0].rsplit(" ", 1)[0])["message"] == "stopped at its time limit"


def test_the_secret_is_read_from_its_file_beside_job_json(tmp_path, receiver):
    (tmp_path / SECRET_FILE).write_bytes(SECRET + b"\n")
    notifier = Notifier.for_job(NotifyTarget(url=receiver.url), tmp_path, "job-1", "c1", lambda _: None)
    notifier.post(NotifyKind.COMPLETION, "done")
    notifier.close(timeout_s=10)
    ((headers, body),) = receiver.posts
    assert headers[SIGNATURE_HEADER] == signature(SECRET, body)
