"""The rank -> controller events: every kind survives emit -> parse, and its wire keys are pinned.

The keys below are the wire format that ranks of this release print and the controller and the MPI
tests read: a change here must be deliberate, never a side effect of editing a record.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import pytest

from training.shared import events
from training.shared.events import (
    End,
    EndStatus,
    Event,
    Flush,
    Holder,
    Kept,
    Metrics,
    Notice,
    NoticeKind,
    NoticeSeen,
    NotSafe,
    Restored,
    Resumed,
    Safe,
    Saved,
    Start,
    Step,
    WatcherOff,
)
from training.shared.scalars import MetricPoint

WORKER_START = Start(
    rank=0,
    job="tiny",
    model="mlp",
    dataset="synthetic",
    synthetic=True,
    world_size=2,
    local_rank=0,
    batch=8,
    global_batch=16,
    lr=0.1,
    total_steps=20,
    first_step=4,
    device="cpu",
    pid=123,
)
SCRIPT_START = Start(
    rank=1,
    job="own",
    script="train.py",
    synthetic=False,
    world_size=2,
    planned_world_size=3,
    total_steps=200,
    first_step=0,
    device="cuda:0",
    pid=456,
)
WORKER_STEP = Step(rank=0, step=4, epoch=1, loss=2.1, global_loss=2.05, lr=0.1, samples_per_s=812.5, synthetic=True)
SCRIPT_STEP = Step(rank=0, step=4, epoch=0, loss=2.1, global_loss=2.05, samples_per_s=40.0, synthetic=False)
NOTICE = Notice("instance-action", '{"action": "terminate", "time": "2026-11-23T10:00:00Z"}', 1_800_000_000.5)

# (record, its keys on the wire in order): one line per kind and per sender that fills different fields
WIRE = [
    (
        WORKER_START,
        [
            "event",
            "rank",
            "job",
            "model",
            "dataset",
            "synthetic",
            "world_size",
            "local_rank",
            "batch",
            "global_batch",
            "lr",
            "total_steps",
            "first_step",
            "device",
            "pid",
        ],
    ),
    (
        SCRIPT_START,
        [
            "event",
            "rank",
            "job",
            "script",
            "synthetic",
            "world_size",
            "planned_world_size",
            "total_steps",
            "first_step",
            "device",
            "pid",
        ],
    ),
    (
        Restored(rank=0, step=8, checkpoint="ckpt-8", levels=("L1", "L2"), seconds=0.25, fallbacks=("ckpt-10: bad",)),
        ["event", "rank", "step", "checkpoint", "levels", "seconds", "fallbacks"],
    ),
    (WORKER_STEP, ["event", "rank", "step", "epoch", "loss", "global_loss", "lr", "samples_per_s", "synthetic"]),
    (SCRIPT_STEP, ["event", "rank", "step", "epoch", "loss", "global_loss", "samples_per_s", "synthetic"]),
    (Saved(rank=0, step=8, stall_s=0.0123, bytes=4096), ["event", "rank", "step", "stall_s", "bytes"]),
    (Safe(rank=0, step=8, level="L2"), ["event", "rank", "step", "level"]),
    (NotSafe(rank=0, step=8, level="L2", reason="holder 0: full"), ["event", "rank", "step", "level", "reason"]),
    (
        Flush(rank=0, step=9, reason="notice", level="L1", seconds=0.5, stall_s=0.01),
        ["event", "rank", "step", "reason", "level", "seconds", "stall_s"],
    ),
    (
        Kept(
            rank=0,
            how="flushed",
            version=3,
            files=2,
            bytes=4096,
            newest="job/snapshot.pt",
            written_at=1.8e9,
            level="L1",
            seconds=0.2,
        ),
        ["event", "rank", "how", "version", "files", "bytes", "newest", "written_at", "level", "seconds"],
    ),
    (
        Kept(
            rank=0, how="kept", version=4, files=2, bytes=4096, newest="job/snapshot.pt", written_at=1.8e9, seconds=0.1
        ),
        ["event", "rank", "how", "version", "files", "bytes", "newest", "written_at", "seconds"],
    ),
    (Resumed(rank=0, step=120, total_steps=500), ["event", "rank", "step", "total_steps"]),
    (NoticeSeen(rank=1, notice=NOTICE), ["event", "rank", "kind", "body", "seen_at"]),
    (
        End(rank=0, status=EndStatus.COMPLETED, steps=20, final_loss=1.5, wall_s=12.5),
        ["event", "rank", "status", "steps", "final_loss", "wall_s"],
    ),
    (
        End(rank=0, status=EndStatus.STOPPED, steps=9, final_loss=1.5),
        ["event", "rank", "status", "steps", "final_loss"],
    ),
    (WatcherOff(rank=0, reason="no instance metadata at http://169.254.169.254/"), ["event", "rank", "reason"]),
    (Holder(rank=2, pid=789, directory="/home/u/deepvm/jobs/j/checkpoints"), ["event", "rank", "pid", "directory"]),
    (Metrics(rank=0, point=MetricPoint(12, {"loss": 0.5, "train/acc": 0.75})), ["event", "rank", "step", "values"]),
]


def emitted(event: Event, capsys: pytest.CaptureFixture[str]) -> str:
    events.emit(event)
    out = capsys.readouterr().out
    assert out.endswith("\n") and out.count("\n") == 1  # one line, so ranks' lines never mix
    return out.removesuffix("\n")


def test_every_kind_is_pinned():
    assert {type(event) for event, _ in WIRE} == set(Event.__subclasses__())


@pytest.mark.parametrize(("event", "keys"), WIRE, ids=[f"{e.EVENT}-{len(k)}" for e, k in WIRE])
def test_round_trip_and_wire_keys(event, keys, capsys):
    line = emitted(event, capsys)
    wire = json.loads(line)
    assert list(wire) == keys
    assert wire["event"] == event.EVENT and wire["rank"] == event.rank
    assert events.parse(line) == event


def test_a_notice_is_a_notice_on_the_wire_and_back(capsys):
    wire = json.loads(emitted(NoticeSeen(rank=1, notice=NOTICE), capsys))
    assert {k: wire[k] for k in ("kind", "body", "seen_at")} == NOTICE.to_dict()
    parsed = events.parse(json.dumps(wire))
    assert isinstance(parsed, NoticeSeen) and parsed.notice == NOTICE


def test_nan_loss_round_trips(capsys):
    # a run that stopped before reporting any step ends with final_loss NaN, which JSON writes bare
    parsed = events.parse(emitted(End(rank=0, status=EndStatus.STOPPED, steps=0, final_loss=math.nan), capsys))
    assert isinstance(parsed, End) and math.isnan(parsed.final_loss) and parsed.status is EndStatus.STOPPED


@pytest.mark.parametrize(
    "line",
    [
        "",
        "epoch 1: loss 2.3",  # a script's own print
        "[rank 0] {not json",
        "{not json",
        "[1, 2]",
        '{"loss": 2.3}',  # JSON of a script's own, no "event"
        '{"event": "checkpointed", "rank": 0}',  # an unknown kind
        '{"event": ["step"], "rank": 0}',
        '{"event": "watcher_off", "reason": "x"}',  # no rank
        '{"event": "watcher_off", "rank": 0}',  # a field missing
        '{"event": "watcher_off", "rank": 0, "reason": "x", "extra": 1}',  # a field not its own
        '{"event": "notice", "kind": "rebalance", "body": "{}", "seen_at": 1.0}',  # a notice without a rank
        '{"event": "notice", "rank": 0, "kind": "rebalance"}',  # a notice without all of its fields
        '{"event": "end", "rank": 0, "status": "paused", "steps": 1, "final_loss": 1.0}',  # no EndStatus
        '{"event": "metrics", "rank": 0, "step": 3}',  # no values
        '{"event": "metrics", "rank": 0, "step": 3, "values": {}}',  # no scalar
        '{"event": "metrics", "rank": 0, "step": 3, "values": {"loss": "low"}}',  # not a number
        '{"event": "metrics", "rank": 0, "step": 3, "values": {"a b": 1}}',  # not a TensorBoard tag
        '{"event": "metrics", "rank": 0, "step": -1, "values": {"loss": 1}}',
        '{"event": "metrics", "rank": 0, "step": 3, "values": [1]}',
        '{"event": "metrics", "rank": 0, "step": 3, "values": {"loss": 1}, "wall": 2}',  # a field not its own
    ],
)
def test_a_line_that_is_not_one_of_our_events_is_none(line):
    assert events.parse(line) is None


def test_a_notice_says_which_of_the_two_documents_it_is():
    rebalance = Notice("rebalance", '{"noticeTime": "2026-11-23T09:58:00Z"}', 1.0)
    assert rebalance.kind is NoticeKind.REBALANCE and not rebalance.is_interruption
    assert NOTICE.kind is NoticeKind.INTERRUPTION and NOTICE.is_interruption
    line = json.dumps({"event": "notice", "rank": 1, **rebalance.to_dict()})
    assert '"kind": "rebalance"' in line and events.parse(line) == NoticeSeen(rank=1, notice=rebalance)
    assert f"({rebalance.kind})" == "(rebalance)"  # as the controller's notes print it
    assert events.parse(line.replace('"rebalance"', '"maintenance"')) is None  # no kind of ours


def test_an_interruption_notice_says_when_its_node_goes():
    assert NOTICE.takes_node_at() == datetime(2026, 11, 23, 10, tzinfo=timezone.utc).timestamp()
    assert Notice("instance-action", "not json", 1.0).takes_node_at() is None
    assert Notice("instance-action", '{"action": "terminate"}', 1.0).takes_node_at() is None
    assert Notice("rebalance", '{"noticeTime": "2026-11-23T10:00:00Z"}', 1.0).takes_node_at() is None
