"""`deepvm chaos`'s schedule without a cluster: one simulated run's losses in compressed time, each slot
held by one live node, replacements taking the slots they were bought for, and bad input refused."""

from __future__ import annotations

import pytest

from deepvm_cli.main import main
from provisioning.clusters.plan_choice import catalog_of
from simulation.chaos import ChaosQuestion, LiveNode, SlotMap, measured_speeds, recovery_here
from simulation.cluster import sim_cluster
from simulation.reference import EventKind
from simulation.traces import resolve_trace
from tests.cloud.plans import make_tiering_plan

PLAN = make_tiering_plan(spot=3, holders=1)
CATALOG = catalog_of(PLAN)


def question(
    scale: float = 180.0,
    notice_share: float = 0.5,
    seed: int = 3,
    step_s: float = 90.0,
    seconds_per_step: tuple[float, ...] | None = None,
) -> ChaosQuestion:
    """300 steps of 90 trace-seconds each, replacements joining 45 trace-minutes after a loss."""
    return ChaosQuestion(
        PLAN,
        CATALOG,
        resolve_trace("aws-g4dn-bamboo"),
        seed,
        steps=300,
        step_time_s=step_s / scale,
        time_scale=scale,
        recovery=recovery_here(scale, notice_share, replacement_delay_s=2700.0 / scale),
        seconds_per_step=seconds_per_step,
    )


def test_the_schedule_is_the_simulated_run_in_compressed_time():
    schedule = question().schedule()
    predicted = question().predict()
    lost = [e for e in predicted.events if e.kind is EventKind.LOST]
    assert len(lost) == predicted.interruptions > 0
    assert len(schedule) > len(lost)  # the run carried on past its predicted end, on the same numbers
    for step, event in zip(schedule, lost):
        assert (step.trace_at_h, step.slot, step.notice) == (event.at_h, event.slot, event.notice)
        assert step.at_s == pytest.approx(event.at_h * 3600.0 / 180.0)
        assert step.instance_type == "g4dn.xlarge" and 0 <= step.slot < 3
    assert [s.at_s for s in schedule] == sorted(s.at_s for s in schedule)


def test_a_faster_clock_gives_the_same_losses_sooner():
    """The same question in trace time (steps and delays as long in trace hours) on a clock twice as fast."""
    slow, fast = question(scale=90.0).schedule(), question(scale=180.0).schedule()
    assert len(slow) == len(fast) > 0
    for a, b in zip(slow, fast):
        assert (a.trace_at_h, a.slot, a.notice) == (b.trace_at_h, b.slot, b.notice)
        assert a.at_s == pytest.approx(2 * b.at_s)


def test_a_prediction_with_the_step_time_measured_later_sees_the_lives_the_schedule_saw():
    """The sandbox's step time is known only after the run; the question asked again with it must replay the
    same lives (the same losses, until the run ends), or the prediction is of another run."""
    schedule = question(step_s=90.0).schedule()
    for step_s in (60.0, 240.0):
        again = question(step_s=step_s)
        lost = [(e.at_h, e.slot, e.notice) for e in again.predict().events if e.kind is EventKind.LOST]
        assert lost and lost == [(s.trace_at_h, s.slot, s.notice) for s in schedule][: len(lost)]


def test_measured_step_times_set_the_speed_with_fewer_trainers():
    cluster = sim_cluster(PLAN, CATALOG)
    flops = cluster.spot_groups[0].flops
    measured = measured_speeds(cluster, (2.0, 1.0, 1.0))  # one trainer: twice the time per step
    assert measured.full_pflop_per_hour == cluster.full_pflop_per_hour
    assert measured.pflop_per_hour(2, 2 * flops) == pytest.approx(cluster.full_pflop_per_hour)
    assert measured.pflop_per_hour(1, flops) == pytest.approx(cluster.full_pflop_per_hour / 2)
    slow = question(seconds_per_step=(180.0 / 180, 180.0 / 180, 90.0 / 180)).predict()
    plain = question().predict()
    assert slow.interruptions > 0 and slow.makespan_h > plain.makespan_h  # a node down costs more
    with pytest.raises(ValueError, match=r"1\.\.3 trainers"):
        measured_speeds(cluster, (1.0, 1.0))


def test_notice_share_splits_interrupts_from_terminations():
    assert all(s.notice for s in question(notice_share=1.0).schedule())
    assert not any(s.notice for s in question(notice_share=0.0).schedule())
    mixed = {s.notice for s in question(notice_share=0.5).schedule()}
    assert mixed == {True, False}


def test_slots_go_to_live_nodes_oldest_first_and_replacements_take_the_vacant_one():
    slots = SlotMap.for_plan(PLAN, CATALOG)
    assert slots.slot_types == ("g4dn.xlarge",) * 3
    nodes = [
        LiveNode("i-c", "g4dn.xlarge", "2026-11-23T10:00:02"),
        LiveNode("i-a", "g4dn.xlarge", "2026-11-23T10:00:00"),
        LiveNode("i-b", "g4dn.xlarge", "2026-11-23T10:00:01"),
        LiveNode("i-x", "c5.xlarge", "2026-11-23T09:00:00"),
    ]
    slots.update(nodes)
    assert slots.holder == {0: "i-a", 1: "i-b", 2: "i-c"}
    assert slots.take(1) == "i-b"
    slots.update(nodes)  # i-b still runs out its notice: it is not given a slot again
    assert slots.take(1) is None  # and slot 1 is empty until its replacement joins
    replacement = LiveNode("i-d", "g4dn.xlarge", "2026-11-23T10:05:00")
    slots.update([n for n in nodes if n.instance_id != "i-b"] + [replacement])
    assert slots.holder == {0: "i-a", 1: "i-d", 2: "i-c"}
    slots.update([n for n in nodes if n.instance_id == "i-c"] + [replacement])  # i-a gone without us
    assert slots.holder == {1: "i-d", 2: "i-c"}


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--cluster", "nope", "--trace", "aws-g4dn-bamboo", "--steps", "10", "--step-time", "1"],
            "deepvm: error: no cluster named 'nope'",
        ),
        (["--cluster", "c1", "--trace", "no-such-trace", "--steps", "10", "--step-time", "1"], "deepvm: error: "),
        (
            ["--trace", "aws-g4dn-bamboo", "--steps", "10", "--step-time", "1"],
            "deepvm: error: no cluster named 'deepvm' (the default name; --cluster NAME picks another)",
        ),
        (["--cluster", "c1", "--trace", "gce", "--steps", "10"], "deepvm: error: --step-time is required"),
        (
            ["--cluster", "c1", "--trace", "gce", "--steps", "10", "--step-time", "1", "--time-scale", "0"],
            "deepvm: error: --time-scale must be a positive number, got 0",
        ),
        (
            ["--cluster", "c1", "--trace", "gce", "--steps", "10", "--step-time", "1", "--notice-share", "2"],
            "deepvm: error: --notice-share must be at most 1, got 2",
        ),
    ],
)
def test_bad_input_is_one_line(args, line, capsys):
    code = main(["chaos", *args])
    err = capsys.readouterr().err
    assert code >= 2
    assert err.count("\n") == 1 and err.startswith(line), err
    assert "Traceback" not in err
