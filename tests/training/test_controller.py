"""The real Controller, with its real AttemptSession, NodePool, Replacements, RecoveryLog and jobs table, on a
scripted cluster in this process (tests/training/scripted_cluster.py: no SSH, no mpirun, no cloud): every
path a job takes through trouble, each in well under a second. The sandbox end-to-end runs
(tests/cloud/test_train_e2e.py, test_managed_e2e.py) show the same paths on real hosts, real mpirun and
real torch; these show the controller's decisions, exactly, and fast."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from deepvm_cli.render.job import progress_line, result_lines
from provisioning.core.errors import InputError
from provisioning.planner.plan import Role
from tests.training.controller_rig import H0, T0, T1, T2, Rig, attempts_of
from tests.training.scripted_cluster import (
    KEPT_FILE,
    Call,
    Crash,
    Die,
    Hang,
    HangOnExit,
    Launched,
    NoticeOn,
    Prints,
    RebalanceOn,
    Stuck,
)
from training.control.stops import TrainingCancelled, TrainingFailed, TrainingStopped
from training.head.summary import INTERRUPTIONS
from training.shared.jobstore import JobStatus, JobStore
from training.shared.progress import Outcome, Progress, RecoveryReason

pytestmark = pytest.mark.timeout(30)  # each takes well under a second: a hang is a bug, not a slow machine


@pytest.fixture
def rig(tmp_path) -> Rig:
    return Rig(tmp_path)


def test_a_job_without_trouble_completes_in_one_attempt_and_fetches_its_outputs(rig):
    result = rig.run()
    assert (result.status, result.steps, result.restarts, result.lost_steps) == (JobStatus.COMPLETED, 40, 0, 0)
    assert attempts_of(result) == [(3, 0, 40, Outcome.COMPLETED)] and result.recoveries == []
    assert rig.nodes.called("prepare") == [(T0, T1, T2, H0)] and rig.nodes.called("fetch") == [(T0,)]
    assert (Path(result.out_dir) / "model.pt").exists() and rig.steps[-1] == 40
    row = rig.row()
    assert (row.status, row.step, row.checkpoint_step, row.world_size) == (JobStatus.COMPLETED, 40, 40, 3)
    assert rig.cluster.retired == [] and rig.buyer.bought == []
    assert ("completed", f"{result.job_id}: step 40, loss 0.5000") in rig.cluster.events


def test_a_notice_relaunches_at_once_from_the_flushed_step_asks_no_node_again_and_folds_the_replacement_in(rig):
    """The noticed node leaves, the survivors go on from the very step flushed (nothing lost) without any node
    being probed or asked for notices again (they just ran the attempt to its end); the replacement, ready
    only after the relaunch chose its nodes, is folded in at the next step."""
    rig.buyer.gate.clear()
    rig.world.faults = [NoticeOn(1, 6, node=T1), Call(2, 9, action=rig.buyer.gate.set, hold=True)]
    result = rig.run()

    assert attempts_of(result)[:2] == [(3, 0, 6, Outcome.STOPPED), (2, 6, attempts_of(result)[1][2], Outcome.STOPPED)]
    assert attempts_of(result)[2][0] == 3 and result.steps == 40 and result.lost_steps == 0
    notice, fold = result.recoveries
    assert (notice.reason, notice.nodes, notice.from_step, notice.resumed_step) == (RecoveryReason.NOTICE, (T1,), 6, 6)
    assert (notice.world_before, notice.world_after, notice.lost_steps) == (3, 2, 0)
    assert notice.detect_to_checkpoint_s is not None and notice.phases is not None
    assert notice.phases.total_s == pytest.approx(notice.detect_to_resumed_s, abs=0.01)
    assert (fold.reason, fold.world_before, fold.world_after, fold.lost_steps) == (RecoveryReason.FOLD_IN, 2, 3, 0)
    assert T1 not in result.attempts[1].nodes and T1 not in result.attempts[2].nodes
    assert rig.nodes.called("probe") == [] and rig.nodes.called("notices") == []  # relaunch without waste
    (new,) = [i for i in result.attempts[2].nodes if i not in (T0, T1, T2, H0)]
    assert rig.nodes.called("prepare") == [(T0, T1, T2, H0), (new,)]
    assert rig.buyer.bought == [(Role.TRAINER, 1)] and rig.cluster.retired == []  # the cloud takes T1
    assert any(n.startswith("Spot interruption notice on trainer-t0000001 (instance-action)") for n in rig.notes)
    assert result.restarts == 2 and rig.row().lost_steps == 0


def test_a_rebalance_recommendation_alone_checkpoints_early_and_the_node_trains_on(rig):
    """Issue 21 item 3: the node is not excluded, nothing is bought or retired, no attempt is stopped."""
    rig.world.faults = [RebalanceOn(1, 6, node=T1)]
    result = rig.run()
    assert attempts_of(result) == [(3, 0, 40, Outcome.COMPLETED)] and result.restarts == 0 and result.recoveries == []
    assert rig.buyer.bought == [] and rig.cluster.retired == [] and rig.controller.pool.excluded() == {}
    assert "checkpoint of step 6 safe at L1 in 0.00s (rebalance)" in rig.notes
    said = [n for n in rig.notes if n.startswith("rebalance recommendation on trainer-t0000001: it trains on")]
    assert len(said) == 1 and ("rebalance", f"{result.job_id}: {said[0]}") in rig.cluster.events
    assert rig.row().checkpoint_step == 40 and sorted(rig.cluster.running()) == sorted([T0, T1, T2, H0])


def test_an_interruption_after_a_recommendation_stops_the_node_as_a_notice_does_and_buys_one_replacement(rig):
    rig.world.faults = [RebalanceOn(1, 4, node=T1), NoticeOn(1, 8, node=T1)]
    result = rig.run()
    assert attempts_of(result)[0] == (3, 0, 8, Outcome.STOPPED) and result.steps == 40 and result.lost_steps == 0
    assert (result.recoveries[0].reason, result.recoveries[0].nodes) == (RecoveryReason.NOTICE, (T1,))
    assert rig.buyer.bought == [(Role.TRAINER, 1)] and rig.cluster.retired == []  # the cloud takes T1
    assert all(T1 not in a.nodes for a in result.attempts[1:]) and len(result.attempts[-1].nodes) == 4
    said = [n for n in rig.notes if n.startswith("Spot interruption notice on trainer-t0000001")]
    assert said == ["Spot interruption notice on trainer-t0000001 (instance-action): checkpointing, then without it"]


def test_a_replacement_ready_after_a_recommendation_joins_and_drains_nothing(rig):
    """T2's recommendation, then T1's interruption: T1's replacement is folded in beside T2, which trains on;
    the cluster runs the plan's nodes (T1 is the cloud's to take) and nothing is retired."""
    rig.world.faults = [RebalanceOn(1, 4, node=T2), NoticeOn(1, 6, node=T1)]
    result = rig.run()
    assert rig.buyer.bought == [(Role.TRAINER, 1)] and rig.cluster.retired == []
    last = result.attempts[-1]
    assert T2 in last.nodes and T1 not in last.nodes and last.world_size == 3 and result.steps == 40
    assert set(rig.controller.pool.excluded()) == {T1} and len(set(rig.cluster.running()) - {T1}) == 4


def test_a_recommendation_read_before_a_relaunch_keeps_the_node_in_it(rig):
    """After a failure the spot nodes' notices are read: a recommendation alone is no reason to leave T1 out
    (it would run on, billing, excluded)."""
    rig.world.faults = [RebalanceOn(1, 6, node=T1), Die(1, 9, nodes=(T0,))]
    result = rig.run()
    assert T1 in result.attempts[1].nodes and "i-t0000001 has a rebalance recommendation: training on it" in rig.notes
    assert rig.buyer.bought == [(Role.TRAINER, 1)] and rig.cluster.retired == [
        ((T0,), "unreachable over SSH after the job failed")
    ]
    assert set(rig.controller.pool.excluded()) == {T0}


def test_a_replacement_ready_before_the_relaunch_chooses_its_nodes_joins_it_without_a_fold_in(rig):
    rig.world.faults = [NoticeOn(1, 6, node=T1, before_exit=lambda: rig.wait_ready("i-t"))]
    result = rig.run()
    assert attempts_of(result) == [(3, 0, 6, Outcome.STOPPED), (3, 6, 40, Outcome.COMPLETED)]
    assert [r.reason for r in result.recoveries] == [RecoveryReason.NOTICE]
    assert result.recoveries[0].world_after == 3 and T1 not in result.attempts[1].nodes


def test_a_node_lost_without_notice_is_retired_and_the_job_resumes_from_the_newest_checkpoint(rig):
    rig.buyer.gate.clear()  # the replacement comes while the relaunch trains
    rig.world.faults = [Die(1, 9, nodes=(T0,)), Call(2, 8, action=rig.buyer.gate.set)]
    result = rig.run()
    lost = result.recoveries[0]
    assert (lost.reason, lost.nodes, lost.from_step, lost.resumed_step, lost.lost_steps) == (
        RecoveryReason.NODE_LOST,
        (T0,),
        9,
        5,
        4,
    )
    assert attempts_of(result)[0] == (3, 0, 9, Outcome.FAILED) and attempts_of(result)[1][:2] == (2, 5)
    assert rig.cluster.retired == [((T0,), "unreachable over SSH after the job failed")]
    assert rig.nodes.called("probe") == [(T0, T1, T2, H0)]  # once, after the failure; not again before the relaunch
    assert rig.nodes.called("notices") == [(T1, T2)]  # the spot nodes that answered
    assert rig.cluster.refreshes == 1 and rig.buyer.bought == [(Role.TRAINER, 1)]
    assert result.steps == 40 and result.lost_steps == 4 and rig.row().lost_steps == 4
    failed = rig.notes.index("attempt 1: mpirun failed (mpirun exit 1):")
    assert rig.notes[failed + 1] == "  ORTE has lost communication with a remote daemon (i-t0000000)"


def test_a_checkpoint_not_on_disk_is_said_and_never_claimed(rig):
    """Issue 40: with the holder's disk full, `status` said "checkpoint at step 400" while the newest on disk was
    200. A checkpoint counts once it is safe (Safe), not when it is taken (Saved); one that never reaches L2 is
    said in one line with DeepCheck's reason, and a node lost after it resumes from the newest safe."""
    rig.world.disk_full_from = 10
    rig.world.faults = [Die(1, 12, nodes=(T0,))]
    result = rig.run()
    said = [n for n in rig.notes if "is not safe at L2" in n]
    assert said[0] == (
        "checkpoint of step 10 is not safe at L2: holder 0: OSError(28, 'No space left on device'); "
        "the newest safe is step 5"
    )
    lost = result.recoveries[0]
    assert (lost.from_step, lost.resumed_step, lost.lost_steps) == (12, 5, 7)
    assert rig.row().checkpoint_step == 5  # every later one was taken, none safe


def test_two_nodes_lost_at_once_are_retired_together_and_both_bought_back(rig):
    rig.buyer.gate.clear()
    rig.world.faults = [Die(1, 9, nodes=(T0, T2)), Call(2, 8, action=rig.buyer.gate.set)]
    result = rig.run()
    assert result.recoveries[0].nodes == (T0, T2) and result.recoveries[0].world_after == 1
    assert rig.cluster.retired == [((T0, T2), "unreachable over SSH after the job failed")]
    assert rig.buyer.bought == [(Role.TRAINER, 2)] and result.steps == 40
    assert "buying 2 spot g4dn.xlarge trainers in us-east-1a (buy-like-plan)" in rig.notes


def test_losing_the_only_holder_without_l3_fails_and_says_the_checkpoints_are_lost(rig):
    rig.world.faults = [Die(1, 9, nodes=(H0,))]
    with pytest.raises(TrainingFailed, match=r"no checkpoint holder .* unless it had L3"):
        rig.run()
    assert rig.row().status is JobStatus.FAILED and rig.buyer.bought == []
    assert rig.cluster.retired == [((H0,), "unreachable over SSH after the job failed")]


def test_losing_the_only_holder_with_l3_waits_for_a_new_holder_and_resumes_from_s3(rig):
    rig.with_l3().world.faults = [Die(1, 12, nodes=(H0,))]
    rig.buyer.gate.clear()
    rig.open_gate_on("no checkpoint holder left")
    result = rig.run()
    assert rig.buyer.bought == [(Role.HOLDER, 1)]
    assert "no checkpoint holder left: waiting for a replacement; the job continues from S3 (L3)" in rig.notes
    lost = result.recoveries[0]
    assert (lost.nodes, lost.from_step, lost.resumed_step) == ((H0,), 12, 10) and result.steps == 40
    assert H0 not in result.attempts[1].nodes and len(result.attempts[1].nodes) == 4


def test_a_node_that_hangs_is_noticed_by_the_stall_watch_killed_retired_and_replaced(rig):
    rig.world.faults = [Hang(1, 9, node=T2)]
    result = rig.run(stall_timeout_s=0.3)
    stall = result.recoveries[0]
    assert (stall.reason, stall.nodes, stall.from_step, stall.resumed_step) == (RecoveryReason.STALL, (T2,), 9, 5)
    assert result.attempts[0].status is Outcome.FAILED and result.attempts[0].returncode == 137
    assert rig.cluster.retired == [((T2,), "unreachable over SSH after the job failed")]
    assert any(n.startswith("no progress for 0s (limit 0s): a node hangs") for n in rig.notes)
    assert ("stall", next(m for k, m in rig.cluster.events if k == "stall")) in rig.cluster.events
    stacks = [(prefix, text) for prefix, text in rig.logs if "(most recent call first)" in text]
    assert [prefix.split()[-1] for prefix, _ in stacks] == ["r0", "r1", "r2"]  # every trainer's, before the kill


def test_a_job_stuck_on_its_way_out_is_stopped_after_the_leave_grace_not_its_steps_limit_and_completes_again(rig):
    """After trainer 0's End no step comes: the limit is then the leave grace (here 0.4 s, below the steps' 2 s so
    that the note tells which fired), not the steps' (CI's reference run was killed 60 s after its last step by
    the steps' limit); a job that does not exit within it hangs, and a relaunch from its checkpoint completes it."""
    rig.world.faults = [HangOnExit(1, 40)]
    controller = rig.build(stall_timeout_s=2.0)
    controller.session.stall.ending_s = 0.4
    result = controller.run()
    assert (result.status, result.steps, result.lost_steps) == (JobStatus.COMPLETED, 40, 0)
    assert [(a.first_step, a.last_step, a.status) for a in result.attempts] == [
        (0, 40, Outcome.FAILED),
        (40, 40, Outcome.COMPLETED),
    ]
    assert any(
        n.startswith("no exit 0s after trainer 0 ended its run (limit 0s): a node hangs on the way out")
        for n in rig.notes
    ), rig.notes
    assert [p.split()[-1] for p, text in rig.logs if "(most recent call first)" in text] == ["r0", "r1", "r2"]


def test_a_hang_alike_after_a_frozen_node_was_replaced_is_retried_not_taken_for_the_scripts(rig):
    """Two hangs before the first step read the same; when the first one's probe found a node frozen, the
    relaunch runs on other nodes and the second is no repeat of the script's."""
    rig.world.faults = [Hang(1, 0, node=T2), Hang(2, 0, node=T1)]
    result = rig.run(startup_grace_s=0.3)
    assert result.steps == 40 and len(rig.nodes.attempts) == 3
    assert [nodes for nodes, _ in rig.cluster.retired] == [(T2,), (T1,)]


def test_cancel_after_a_checkpoint_flushes_the_step_and_ends_the_job_for_good(rig):
    rig.world.faults = [Call(1, 8, action=rig.cancel("checkpoint"), hold=True)]
    with pytest.raises(TrainingCancelled, match=r"cancelled at step (\d+) \(checkpoint at step \1\)"):
        rig.run()
    row = rig.row()
    assert row.status is JobStatus.CANCELLED and row.message == "cancelled (checkpoint)"
    assert row.checkpoint_step == row.step >= 8 and len(rig.nodes.attempts) == 1
    assert "stopping: trainers checkpoint and leave (Ctrl-C again to kill at once)" in rig.notes


def test_cancel_now_kills_the_job_without_a_last_checkpoint(rig):
    rig.world.faults = [Call(1, 8, action=rig.cancel("now"), hold=True)]
    with pytest.raises(TrainingCancelled):
        rig.run()
    row = rig.row()
    assert row.status is JobStatus.CANCELLED and row.message == "cancelled (now)" and row.checkpoint_step == 5
    assert rig.nodes.attempts[0].returncode == 137


def test_a_cancel_between_attempts_ends_the_job_before_the_next_launch(rig):
    rig.cancel("checkpoint")()  # there before the first launch
    with pytest.raises(TrainingCancelled, match="cancelled at step 0"):
        rig.run()
    assert rig.nodes.attempts == [] and rig.row().status is JobStatus.CANCELLED


def test_ctrl_c_stops_cleanly_and_the_printed_command_resumes_without_a_restart(rig):
    def ctrl_c_at_step_8(p: Progress) -> None:
        rig.steps.append(p.step)
        if p.step == 8 and rig.steps.count(8) == 1:
            raise KeyboardInterrupt

    rig.world.faults = [Call(1, 8, hold=True)]  # the job waits for the stop the Ctrl-C asks for
    controller = rig.build()
    controller.report = replace(controller.report, progress=ctrl_c_at_step_8)
    with pytest.raises(TrainingStopped, match=r"stopped at step \d+ .*`deepvm train .* --controller local --resume`"):
        controller.run()
    row = rig.row()
    assert row.status is JobStatus.STOPPED and row.checkpoint_step == row.step >= 8

    rig.world.faults = []
    result = rig.run(resume=True)
    assert result.restarts == 0 and result.recoveries[0].reason is RecoveryReason.USER_RESUME
    assert result.attempts[0].first_step == row.step and result.job_id == row.job_id and result.steps == 40


def test_a_restarted_controller_resumes_its_job_from_the_newest_checkpoint(rig):
    first = rig.build(job_id="fake-1")
    JobStore().put(replace(first.job.row, step=12, checkpoint_step=10, world_size=3))  # then the head rebooted
    rig.world.checkpoint = 10
    result = rig.run(job_id="fake-1")
    restart = result.recoveries[0]
    assert (restart.reason, restart.from_step, restart.resumed_step, restart.lost_steps) == (
        RecoveryReason.CONTROLLER_RESTART,
        12,
        10,
        2,
    )
    assert result.restarts == 1 and result.job_id == "fake-1" and result.steps == 40
    assert any(n.startswith("controller restarted: resuming job fake-1") for n in rig.notes)


def test_resume_continues_a_failed_job_as_a_restart_and_refuses_when_there_is_nothing_to_resume(rig):
    with pytest.raises(InputError, match="nothing to resume: no unfinished job named 'fake' on cluster c1"):
        rig.build(resume=True)
    rig.world.faults = [Crash(n, 0) for n in (1, 2)]
    with pytest.raises(TrainingFailed):
        rig.run()
    rig.world.faults = []
    result = rig.run(resume=True)
    assert result.recoveries[0].reason is RecoveryReason.CONTROLLER_RESTART and result.restarts == 2


def test_a_script_that_exits_3_at_step_0_is_tried_twice_and_ends_with_its_own_error(rig):
    """Issue 23 point 2: it was tried three times, then reported as a ~700-character line of Open MPI's noise."""
    exit_3 = (
        "Traceback (most recent call last):",
        '  File "exit3.py", line 3, in <module>',
        "SystemExit: 3",
        "deepvm rank: exit3.py exited with 3",
    )
    rig.world.faults = [Crash(n, 0, said=exit_3, code=3, banner=True) for n in (1, 2, 3)]
    cause = (
        "exit3.py exited with 3 (rank 0 on trainer-t0000000, mpirun exit 3): the same failure in 2 attempts in a "
        "row, without a step: not retried"
    )
    with pytest.raises(TrainingFailed) as failed:
        rig.run()
    assert str(failed.value) == cause and rig.row().status is JobStatus.FAILED and rig.row().message == cause
    assert len(rig.nodes.attempts) == 2 and rig.nodes.called("probe") == [(T0, T1, T2, H0)]  # probed once, after 1
    said = rig.notes[rig.notes.index("attempt 1: rank 0 on trainer-t0000000 failed (mpirun exit 3):") :][:5]
    assert said[1:] == [f"  {line}" for line in exit_3]
    assert not [n for n in rig.notes if "MPI_ABORT" in n or n.startswith("---")]  # the banner stays in the log
    assert rig.cluster.retired == [] and rig.buyer.bought == []


def test_failures_that_differ_are_retried_up_to_max_failures(rig):
    rig.world.faults = [Crash(n, 0, said=(f"RuntimeError: rendezvous {n} timed out",)) for n in (1, 2, 3, 4)]
    with pytest.raises(
        TrainingFailed,
        match=r"^RuntimeError: rendezvous 3 timed out \(rank 0 on trainer-t0000000, "
        r"mpirun exit 1\): 3 attempts in a row failed without a step: giving up$",
    ):
        rig.run()
    assert len(rig.nodes.attempts) == 3 and rig.nodes.called("probe") == [(T0, T1, T2, H0)] * 2


def test_a_job_that_hangs_before_its_first_step_is_stopped_after_its_startup_grace(rig):
    """Issue 23 point 1: the grace was a fixed 900 s whatever --stall-timeout said. The script hangs, not a node:
    every node answers the probe and is kept, and the second identical hang ends the job."""
    rig.world.faults = [Stuck(n, 0) for n in (1, 2, 3)]
    with pytest.raises(
        TrainingFailed,
        match=r"^no first step within the start-up grace of 0s \(killed as hung, "
        r"mpirun exit 137\): the same failure in 2 attempts in a row",
    ):
        rig.run(startup_grace_s=0.2, stall_timeout_s=600.0)
    assert len(rig.nodes.attempts) == 2 and rig.nodes.called("probe") == [(T0, T1, T2, H0)]
    stalls = [n for n in rig.notes if n.startswith("no first step ")]
    assert len(stalls) == 2 and "(start-up grace 0s): the job hangs before training" in stalls[0]
    failed = rig.notes.index("attempt 1: killed as hung (mpirun exit 137):")
    assert rig.notes[failed + 1] == "  no first step within the start-up grace of 0s" and rig.cluster.retired == []
    assert rig.row().status is JobStatus.FAILED


def test_a_script_without_ctx_step_is_held_only_to_the_output_silence_its_job_file_asks_for(rig):
    """Issue 36 finding 1: an unchanged torchrun script (`run.calls_step: false`) died at the start-up grace, 300 s,
    of a first step it never takes. It meets no step limit; `stall.silence` (the file's 1800 s, here 0.4 s) is
    reset by every line a rank prints (12 lines over 0.6 s keep it alive) and stops the attempt once they stop."""
    rig.job.write_text("name: fake\nrun: {script: train.py, calls_step: false}\nstall: {silence: 1800}\n")
    (rig.job.parent / "train.py").write_text("print('training')\n")
    rig.world.faults = [Prints(1, 0, lines=12, every_s=0.05, hangs=True), Prints(2, 0, lines=3)]
    controller = rig.build()
    stall = controller.session.stall
    assert (stall.startup_s, stall.limit_s(), stall.silence_s) == (None, None, 1800)
    stall.silence_s = 0.4
    result = controller.run()
    assert result.status is JobStatus.COMPLETED and [a.status for a in result.attempts] == [
        Outcome.FAILED,
        Outcome.COMPLETED,
    ]
    said = [n for n in rig.notes if n.startswith("no output line from any rank for ")]
    assert len(said) == 1 and "(stall.silence 0s): the script or a node hangs; stopping the job" in said[0], rig.notes
    assert rig.notes[rig.notes.index("attempt 1: killed as hung (mpirun exit 137):") + 1] == (
        "  no output line within stall.silence of 0s"
    )
    assert [text for _, text in rig.logs].count("epoch 11") == 3  # every trainer's 12th line came before the kill
    assert rig.cluster.retired == []  # every node answered: the script hung, no node


def test_no_trainer_left_waits_for_the_replacement_spot_nodes(rig):
    rig.buyer.gate.clear()
    rig.world.faults = [Die(1, 9, nodes=(T0, T1, T2))]
    rig.open_gate_on("no trainer left")
    result = rig.run()
    assert "no trainer left: waiting for the replacement node" in rig.notes
    assert rig.buyer.bought == [(Role.TRAINER, 3)] and attempts_of(result)[1][:2] == (3, 5)


def test_a_launched_scripts_notice_says_what_deepvm_does_and_its_recovery_counts_the_work_redone_in_time(rig):
    """Issue 36 finding 7: for a script that checkpoints nothing deepvm knows of (a launched script, whose files
    deepvm keeps), the notice said "checkpointing"; its recovery never closed (it takes no step), so the job said
    "0 steps lost" after the script redid everything since its file was written, and status "checkpoint at step
    0". The notice says what happens, the recovery closes when the script runs again, and what it lost is the
    time from the kept file's writing to the stop."""
    rig.launched_script()
    rig.world.total_steps = 0  # its metrics.json: a script that reports no steps
    rig.world.faults = [
        Launched(1, 0, lines=("epoch 0", "epoch 1"), written_ago_s=40.0, notice_on=T1),
        Launched(2, 0, lines=("epoch 1",)),
    ]
    result = rig.run()

    (notice,) = [n for n in rig.notes if n.startswith("Spot interruption notice on trainer-t0000001")]
    assert notice == (
        "Spot interruption notice on trainer-t0000001 (instance-action): stopping the script (SIGTERM) "
        "and keeping its files (checkpoint.files, $DEEPVM_CHECKPOINT_DIR), then without it"
    )
    (recovery,) = result.recoveries
    assert (recovery.reason, recovery.nodes, recovery.world_before, recovery.world_after) == (
        RecoveryReason.NOTICE,
        (T1,),
        3,
        3,
    )  # the replacement was ready before the relaunch
    assert recovery.lost_steps == 0 and recovery.lost_s == pytest.approx(40.0, abs=3.0)
    assert result.lost_s == pytest.approx(40.0, abs=3.0) and rig.row().lost_s == pytest.approx(40.0, abs=3.0)
    (recovered,) = [n for n in rig.notes if n.startswith("recovered (notice)")]
    assert recovered.startswith(
        "recovered (notice): 3 -> 3 trainers, ran again from its kept files, 0m40s of work lost, "
    ) and recovered.endswith(" from notice to running"), recovered
    said = "\n".join(result_lines(result))
    assert "steps lost" not in said and "step 0/0" not in said, said
    assert ", 1 restarts, 0m40s of work lost, " in said and "ran again from its kept files (0m40s of work lost)" in said
    row = rig.row()
    assert (row.kept_file, row.kept_at) == (KEPT_FILE, rig.world.kept_at)  # the relaunch's own, after its first line
    assert row.saved(row.kept_at + 40) == f"kept {KEPT_FILE}, written 0m40s ago"
    assert ("completed", f"{result.job_id}: its script completed (it reports no steps)") in rig.cluster.events


def test_a_launched_scripts_node_going_as_its_notice_said_before_a_clean_end_is_no_loss_without_notice(rig):
    """Issue 36 finding 7: a launched script's stop (its signal, its grace, the flush) may outlast the notice, and
    its node goes before mpirun ends cleanly: the failed attempt's probe found that node dead and said "lost
    without notice", a "node-lost" event beside the "notice" one (the run's summary counted two interruptions).
    It went as its notice said: one interruption, the notice's."""
    rig.launched_script()
    rig.world.total_steps = 0
    rig.world.faults = [Launched(1, 0, lines=("epoch 0",), notice_on=T1, dies=T1), Launched(2, 0, lines=("epoch 1",))]
    result = rig.run()

    assert [a.status for a in result.attempts] == [Outcome.FAILED, Outcome.COMPLETED]
    assert not [n for n in rig.notes if "without notice" in n], rig.notes
    assert (
        f"{T1} went as its interruption notice said, before the attempt ended cleanly; restarting from the newest "
        "complete checkpoint" in rig.notes
    )
    assert [kind for kind, _ in rig.cluster.events if kind in INTERRUPTIONS] == ["notice"]
    (recovery,) = result.recoveries
    assert (recovery.reason, recovery.nodes) == (RecoveryReason.NOTICE, (T1,))


def test_a_launched_script_that_keeps_its_files_makes_progress_though_it_reports_no_steps(rig):
    """A script without steps never progressed in deepvm's eyes: every failed attempt counted towards max_failures,
    so nodes lost hours apart, each after the script had saved, ended the job. Its kept files are its progress."""
    rig.launched_script()
    rig.world.total_steps = 0
    rig.world.faults = [
        Launched(1, 0, lines=("epoch 0",), dies=T1),
        Launched(2, 0, lines=("epoch 1",), dies=T2),
        Launched(3, 0, lines=("epoch 2",)),
    ]
    result = rig.run(max_failures=2)
    assert [a.status for a in result.attempts] == [Outcome.FAILED, Outcome.FAILED, Outcome.COMPLETED], rig.notes


def test_a_launched_script_shows_how_long_it_runs_its_last_line_and_its_newest_kept_file_not_step_0_of_0(rig):
    """Issue 36 finding 7: a launched script without step reports showed no progress at all (or "step 0/0"): its
    progress says what deepvm knows, how long it has run, trainer 0's last line, the newest kept file's age."""
    rig.launched_script()
    rig.world.total_steps = 0
    lines = tuple(f"epoch {n}: loss 0.{9 - n}" for n in range(6))
    rig.world.faults = [Launched(1, 0, lines=lines, every_s=0.03, written_ago_s=5.0)]  # a tick (0.01 s) between lines
    rig.run()

    assert rig.progress and all(p.script is not None and p.step == 0 for p in rig.progress)
    shown = [p.script for p in rig.progress if p.script is not None]
    assert {s.last_line for s in shown} >= set(lines[1:-1]) and shown[-1].running_s >= 0.1
    assert all(
        (s.newest, s.kept_files) == (KEPT_FILE, 1) and s.newest_age_s == pytest.approx(5.0, abs=2.0)
        for s in shown
        if s.last_line not in ("", lines[0])
    )  # kept after its first line
    line = progress_line(replace(rig.progress[-1], script=replace(shown[-1], running_s=72.0, newest_age_s=5.0)))
    assert (
        line == f"running 1m12s · kept {KEPT_FILE}, written 0m05s ago · 3 trainers · $0.0000 · > {lines[-2]}"
        or line == f"running 1m12s · kept {KEPT_FILE}, written 0m05s ago · 3 trainers · $0.0000 · > {lines[-1]}"
    )


def test_a_launched_script_whose_adapter_reports_steps_counts_the_steps_it_lost(rig):
    """A framework adapter inside a launched script reports its steps (Resumed, Step): a node lost without notice
    past its last save loses the steps since, counted as for ctx.step (Resumed sets the relaunch's first step),
    and its recovery closes at its first step, not when the script starts."""
    rig.launched_script()
    rig.world.faults = [Launched(1, 0, adapter=8, dies=T1), Launched(2, 0, adapter=3)]
    result = rig.run()

    (recovery,) = result.recoveries
    assert (recovery.reason, recovery.from_step, recovery.resumed_step, recovery.lost_steps, recovery.lost_s) == (
        RecoveryReason.NODE_LOST,
        8,
        5,
        3,
        None,
    )
    assert result.lost_steps == 3 and result.lost_s == 0.0
    assert any(
        n.startswith("recovered (node-lost): 3 -> 3 trainers, resumed at step 5, 3 steps lost") for n in rig.notes
    )
