"""The money guard in the real Controller (training/control/jobclock.py, winddown.py), on the scripted cluster of
tests/training/test_controller.py: --idle ends a job that stops stepping, --max-duration stops one after a
checkpoint, a job that waits for nodes nobody can buy ends, a job that lost every trainer before its first
checkpoint ends, and whatever was being bought for a job that ends is terminated. The clocks are the test's
(moved by the scripted job at a step), so no test waits for a limit to pass."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from provisioning.core.errors import DeepvmError, JobFailed, StoppedByUser
from tests.training.controller_rig import T0, T1, T2, Rig
from tests.training.scripted_cluster import Call, Die, NoticeOn
from tests.training.test_jobclock import Clocks
from training.control.jobclock import JobClock, JobLimited, JobTimers, LimitKind
from training.control.stops import StoppedAtLimit, TrainingCancelled, TrainingFailed, ended_on_head
from training.shared.jobstore import JobStatus

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def rig(tmp_path) -> Rig:
    return Rig(tmp_path)


def _guarded(rig: Rig, clocks: Clocks, **timers: float):
    controller = rig.build(timers=JobTimers(**timers))
    controller.stops.clock = JobClock(JobTimers(**timers), wall=lambda: clocks.wall, mono=lambda: clocks.mono)
    return controller


def after_step(rig: Rig, step: int, action) -> None:
    """Run `action` on a thread of its own once the controller has handled trainer 0's `step` (a clock moved
    before that step is handled would count from it)."""

    def wait() -> None:
        deadline = time.monotonic() + 5
        while step not in rig.steps and time.monotonic() < deadline:
            time.sleep(0.002)
        action()

    threading.Thread(target=wait, daemon=True).start()


def _note_hook(rig: Rig, when: str, action) -> None:
    """Run `action` once the controller says something starting with `when` (hooks add up)."""
    controller = rig.controller
    said = controller.report.note

    def note(text: str) -> None:
        said(text)
        if text.startswith(when):
            action()

    controller.report = replace(controller.report, note=note)
    controller.nodes.report = controller.report  # the node pool's notes go through the same reporter


def test_idle_ends_a_job_that_stops_stepping_as_failed_at_once_keeping_its_checkpoint(rig):
    clocks = Clocks()
    rig.world.faults = [Call(1, 9, action=lambda: after_step(rig, 9, lambda: clocks.advance(601)), hold=True)]
    controller = _guarded(rig, clocks, idle_s=600)
    with pytest.raises(JobLimited, match=r"^no step was trained for 10 min \(--idle\)$") as raised:
        controller.run()
    assert raised.value.reached.kind is LimitKind.IDLE
    row = rig.row()
    assert (row.status, row.checkpoint_step) == (JobStatus.FAILED, 5) and row.message.startswith("no step was trained")
    assert rig.nodes.attempts[0].returncode == 137 and len(rig.nodes.attempts) == 1  # killed, not relaunched


def test_max_duration_stops_the_job_after_a_checkpoint_of_its_step_resumable(rig):
    clocks = Clocks()
    rig.world.faults = [Call(1, 8, action=lambda: clocks.advance(3601), hold=True)]
    controller = _guarded(rig, clocks, max_duration_s=3600)
    with pytest.raises(StoppedAtLimit, match=r"stopped at its time limit \(--max-duration 1 h\)"):
        controller.run()
    row = rig.row()
    assert row.status is JobStatus.STOPPED and row.checkpoint_step == row.step >= 8  # flushed where it stopped
    assert "stopping: trainers checkpoint and leave (Ctrl-C again to kill at once)" in rig.notes


@pytest.mark.parametrize("limit", ["max_duration_s", "idle_s"])
def test_a_job_ended_at_a_limit_exits_alike_under_a_local_controller_and_followed_from_its_head(rig, limit):
    """README "Exit codes": a job stopped at --max-duration exits 130 (stopped, resumable) and one failed at
    --idle exits 6, whether `deepvm train` ran its controller (--controller local) or followed it on the head,
    whose log's last state (what the head's job service writes of the same end) is all it has to go by."""
    clocks = Clocks()
    rig.world.faults = [Call(1, 8, action=lambda: after_step(rig, 8, lambda: clocks.advance(3601)), hold=True)]
    controller = _guarded(rig, clocks, **{limit: 3600})
    with pytest.raises(DeepvmError) as raised:
        controller.run()
    local = raised.value
    followed = ended_on_head(rig.row().status, str(local))
    expected = (130, StoppedByUser) if limit == "max_duration_s" else (6, JobFailed)
    for ended in (local, followed):
        assert (ended.exit_code, isinstance(ended, expected[1])) == (expected[0], True), type(ended)
    assert str(followed) == str(local)


def test_waiting_for_trainers_nobody_can_buy_ends_the_job_at_idle_and_the_late_purchase_is_terminated(rig):
    clocks = Clocks()
    rig.buyer.gate.clear()  # the replacements do not come
    rig.world.faults = [Die(1, 9, nodes=(T0, T1, T2))]
    controller = _guarded(rig, clocks, idle_s=600)
    _note_hook(rig, "no trainer left", lambda: clocks.advance(601))
    _note_hook(rig, "waiting for the replacements being bought", rig.buyer.gate.set)  # it comes after all
    with pytest.raises(JobLimited, match=r"^no trainer could be bought within the plan's cap, budget and deadline"):
        controller.run()
    assert rig.row().status is JobStatus.FAILED
    assert rig.buyer.bought == [(rig.cluster.plan.nodes[0].role, 3)]
    late = [ids for ids, why in rig.cluster.retired if why == "bought for a job that has ended"]
    assert len(late) == 1 and len(late[0]) == 3 and not {T0, T1, T2} & set(late[0])


def test_every_trainer_lost_before_the_first_checkpoint_ends_the_job_as_failed(rig):
    rig.buyer.gate.clear()
    rig.world.faults = [Die(1, 3, nodes=(T0, T1, T2))]
    rig.build()
    _note_hook(rig, "waiting for the replacements being bought", rig.buyer.gate.set)
    with pytest.raises(TrainingFailed, match="every trainer was lost before the job's first checkpoint"):
        rig.controller.run()
    assert rig.row().status is JobStatus.FAILED
    assert any(why == "bought for a job that has ended" for _, why in rig.cluster.retired)


def test_a_replacement_still_being_bought_when_the_job_is_cancelled_is_terminated(rig):
    rig.buyer.gate.clear()  # the replacement for the lost node is still being bought when the cancel comes
    rig.world.faults = [Die(1, 9, nodes=(T0,)), Call(2, 8, action=rig.cancel("checkpoint"), hold=True)]
    rig.build()
    _note_hook(rig, "waiting for the replacements being bought", rig.buyer.gate.set)
    with pytest.raises(TrainingCancelled):
        rig.controller.run()
    late = [ids for ids, why in rig.cluster.retired if why == "bought for a job that has ended"]
    assert len(late) == 1 and len(late[0]) == 1 and late[0][0] not in (T0, T1, T2)
    assert rig.row().status is JobStatus.CANCELLED


def test_the_controllers_events_reach_the_reporter_for_the_hook(rig):
    events: list[tuple[str, str]] = []
    rig.world.faults = [NoticeOn(1, 6, node=T1)]
    controller = rig.build()
    controller.report = type(controller.report)(note=rig.notes.append, event=lambda k, m: events.append((k, m)))
    controller.run()
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "notice" and "replacement" in kinds and kinds[-1] == "completed"
    assert events[0][1].startswith("Spot interruption notice on trainer-t0000001")
