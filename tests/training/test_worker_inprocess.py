"""The worker's training loop in this process (world of one): hooks, clean stop, exact resume."""

from __future__ import annotations

import json
import math
import weakref

import pytest
import torch
from worker_jobs import free_port, tiny_job

from provisioning.core.errors import InputError
from training.node import worker
from training.node.distenv import DistEnv
from training.node.hooks import TrainState
from training.node.models import build_model
from training.node.worker import WorkerOptions, main, parse_args, run_training
from training.shared.jobspec import load_job_spec
from training.shared.scalars import WORKER_SCALARS


class Recorder:
    """A CheckpointHook that keeps what it was shown."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.snapshots: dict[int, dict] = {}

    def on_start(self, state: TrainState) -> None:
        self.calls.append(("start", state.step))

    def on_step(self, state: TrainState, step: int) -> None:
        self.calls.append(("step", step))
        assert state.step == step
        self.snapshots[step] = state.state_dict()

    def on_stop(self, state: TrainState, step: int, reason: str) -> None:
        self.calls.append((reason, step))


def single(port: int) -> DistEnv:
    return DistEnv(rank=0, world_size=1, local_rank=0, local_size=1, master_addr="127.0.0.1", master_port=port)


def run(tmp_path, name, steps=4, hooks=(), **options):
    job = tiny_job(tmp_path / name, steps=steps)
    opts = WorkerOptions(job=job, out=tmp_path / name / "out", device="cpu", threads=1, **options)
    return run_training(load_job_spec(job), single(free_port()), opts, hooks), opts.out


def test_hooks_see_every_step_and_state_is_complete(tmp_path, capsys):
    recorder = Recorder()
    metrics, out = run(tmp_path, "a", hooks=[recorder])
    assert recorder.calls == [
        ("start", 0),
        ("step", 1),
        ("step", 2),
        ("step", 3),
        ("step", 4),
        ("completed", 4),
    ]
    snap = recorder.snapshots[2]
    assert set(snap) == {"format", "step", "model", "optimizer", "sampler", "rng", "loss_curve"}
    assert snap["sampler"] == {"epoch": 0, "offset": 8}
    assert metrics.status == "completed" and metrics.steps == 4 and metrics.synthetic is True
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["final_loss"] == metrics.final_loss and math.isfinite(saved["final_loss"])
    model = build_model("resnet18", 4, width=8)
    model.load_state_dict(torch.load(out / "model.pt"))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["event"] for e in lines if e["event"] != "metrics"] == ["start", "step", "step", "end"]
    assert [e["step"] for e in lines if e["event"] == "step"] == [2, 4]


def test_trainer_0_logs_its_scalars_at_its_progress_steps_and_none_when_told_not_to(tmp_path, capsys):
    run(tmp_path, "on")
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    steps = {e["step"]: e for e in lines if e["event"] == "step"}
    points = [e for e in lines if e["event"] == "metrics"]
    assert [p["step"] for p in points] == [2, 4] and lines[-1]["event"] == "end"  # all of them before End
    for point in points:
        values = point["values"]
        assert tuple(values) == WORKER_SCALARS
        assert values["loss"] == pytest.approx(steps[point["step"]]["global_loss"], abs=1e-6)
        assert values["lr"] == steps[point["step"]]["lr"] and values["step_time_s"] > 0
        assert values["samples_per_s"] == pytest.approx(4 / values["step_time_s"], rel=1e-6)  # a global batch of 4
    run(tmp_path, "off", log_metrics=False)
    assert '"metrics"' not in capsys.readouterr().out


@pytest.mark.parametrize("fails", [False, True])
def test_ddp_is_gone_before_its_process_group_is_destroyed(tmp_path, monkeypatch, fails):
    """DDP's Reducer freed after the group held its last reference: ~ProcessGroupGloo then joined gloo's threads
    under the GIL, a rank that never exited after its End (run_training's `finally` says why). So the run's DDP
    must be dead when the group is destroyed, after a run and after one that raised (the traceback's frames hold
    the run)."""
    made: list[weakref.ref] = []
    alive_at_destroy: list[bool] = []
    real_ddp, real_destroy = worker.DistributedDataParallel, torch.distributed.destroy_process_group

    def ddp(*args, **kwargs):
        made.append(weakref.ref(model := real_ddp(*args, **kwargs)))
        return model

    def destroy(*args, **kwargs):
        alive_at_destroy.extend(ref() is not None for ref in made)
        return real_destroy(*args, **kwargs)

    class Failing(Recorder):
        def on_step(self, state: TrainState, step: int) -> None:
            raise RuntimeError("a hook fails")

    monkeypatch.setattr(worker, "DistributedDataParallel", ddp)
    monkeypatch.setattr(torch.distributed, "destroy_process_group", destroy)
    if fails:
        with pytest.raises(RuntimeError, match="a hook fails"):
            run(tmp_path, "failing", steps=3, hooks=[Failing()])
    else:
        run(tmp_path, "stopped", steps=5, stop_at_step=3)
    assert alive_at_destroy == [False]


def test_stop_then_resume_matches_an_uninterrupted_run(tmp_path):
    whole, _ = run(tmp_path, "whole", steps=6)
    stopped, out = run(tmp_path, "part", steps=6, stop_at_step=3)
    assert (stopped.status, stopped.steps) == ("stopped", 3)
    resumed, _ = run(tmp_path, "rest", steps=6, resume=out / "state.pt")
    assert (resumed.first_step, resumed.steps, resumed.status) == (3, 6, "completed")
    assert resumed.final_loss == whole.final_loss
    # the whole run's curve, not this attempt's: the uninterrupted run's points, and the stop's own
    assert sorted(set(resumed.loss_curve) - set(whole.loss_curve)) == [(3, stopped.final_loss)]
    assert set(whole.loss_curve) <= set(resumed.loss_curve)


def test_resume_at_the_last_step_keeps_the_final_loss(tmp_path):
    """A relaunch after the last checkpoint trains nothing and only writes the outputs: its loss is the
    run's, not NaN (a completion reported `loss nan` when the last attempt started at the last step). The
    state resumed from is the one a checkpoint hook is shown at the last step, as DeepCheck saves it."""
    recorder = Recorder()
    whole, _ = run(tmp_path, "whole", steps=4, hooks=[recorder])
    assert tuple(recorder.snapshots[4]["loss_curve"]) == whole.loss_curve  # the last point is in the checkpoint
    torch.save(recorder.snapshots[4], tmp_path / "at-last-step.pt")
    again, _ = run(tmp_path, "again", steps=4, resume=tmp_path / "at-last-step.pt")
    assert (again.first_step, again.steps, again.status) == (4, 4, "completed")
    assert math.isfinite(again.final_loss) and again.final_loss == whole.final_loss
    assert again.loss_curve == whole.loss_curve


def test_a_checkpoint_without_a_loss_curve_still_resumes(tmp_path):
    """Format 1 (before the curve was saved) resumes; the curve then starts at the resume."""
    _, out = run(tmp_path, "part", steps=5, stop_at_step=2)
    old = torch.load(out / "state.pt", weights_only=False)
    old["format"] = 1
    del old["loss_curve"]
    torch.save(old, out / "state.pt")
    resumed, _ = run(tmp_path, "rest", steps=5, resume=out / "state.pt")
    assert (resumed.first_step, resumed.steps) == (2, 5)
    assert next(step for step, _ in resumed.loss_curve) > 2


def test_resume_with_a_larger_plan_keeps_global_batch(tmp_path):
    _, out = run(tmp_path, "part", steps=5, stop_at_step=2)
    resumed, _ = run(tmp_path, "rest", steps=5, resume=out / "state.pt", planned_world_size=2)
    assert resumed.rank_batches == (8,) and resumed.global_batch == 8
    assert (resumed.first_step, resumed.steps) == (2, 5)


def test_resume_from_a_damaged_state_is_one_clear_error(tmp_path):
    bad = tmp_path / "state.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="cannot resume from this state"):
        run(tmp_path, "x", resume=bad)


def test_worker_cli_reports_spec_errors_in_one_line(tmp_path, capsys):
    job = tiny_job(tmp_path)
    job.write_text(job.read_text().replace("batch_size: 4", "batch_size: four"))
    assert main([str(job), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == f"deepvm worker: {job}:6: batch_size: expected an integer, got 'four'\n"


def test_worker_cli_rank_batches(tmp_path, monkeypatch):
    job = tiny_job(tmp_path)
    assert parse_args([str(job), "--out", "o", "--rank-batches", "6,2"]).rank_batches == (6, 2)
    monkeypatch.setenv("DEEPVM_RANK_BATCHES", "3,5")
    assert parse_args([str(job), "--out", "o"]).rank_batches == (3, 5)
    monkeypatch.setenv("DEEPVM_RANK_BATCHES", "3,x")
    with pytest.raises(InputError, match="expected comma-separated integers"):
        parse_args([str(job), "--out", "o"])
