"""Issue 36, Hugging Face's Trainer with `callbacks=[DeepVMCallback()]`: its steps and loss reported as deepvm's
events, deepvm's stop signal answered with HF's own checkpoint at that very step, and HF's own
`get_last_checkpoint` resuming there; in process, then as a 2-trainer DDP script under a real mpirun with a Spot
notice (0 steps lost, every rank resuming at the step it stopped at)."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch
from framework_scripts import HF_SCRIPT, HF_STEPS
from imds import clear_notices, imds_endpoint, post_notice
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint
from worker_jobs import event_lines, is_step, launch_ranks, output_with_a_notice_at

from training.integrations.huggingface import DeepVMCallback, output_dir_kept


class Tiny(torch.nn.Module):
    """A linear regression as HF's Trainer takes any module: a dict with the loss from forward(**batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), labels)}


def _data(n: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return [{"x": row, "labels": row.sum()} for row in x]


class SignalAt(TrainerCallback):
    """deepvm's stop signal to this process at a step's end (before DeepVMCallback's, which comes after it)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def _args(out: Path) -> TrainingArguments:
    return TrainingArguments(
        output_dir=str(out),
        max_steps=30,
        per_device_train_batch_size=4,
        learning_rate=0.05,
        logging_steps=5,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )


@pytest.fixture
def launched_here(tmp_path, monkeypatch):
    """This process as a script deepvm launched, output_dir kept: the environment the rank gives it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEEPVM_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("DEEPVM_KEPT_FILES", json.dumps(["out"]))
    monkeypatch.setenv("DEEPVM_LOG_EVERY", "5")
    monkeypatch.delenv("RANK", raising=False)
    previous = signal.getsignal(signal.SIGTERM)
    yield tmp_path / "out"
    signal.signal(signal.SIGTERM, previous)


def test_the_stop_signal_saves_hfs_checkpoint_at_that_step_and_get_last_checkpoint_resumes_there(launched_here, capfd):
    out = launched_here
    trainer = Trainer(
        model=Tiny(), args=_args(out), train_dataset=_data(256), callbacks=[SignalAt(12), DeepVMCallback()]
    )
    trainer.train()
    assert trainer.state.global_step == 12
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-12"]  # saves are off: this one is the stop's
    first, warned = capfd.readouterr()
    events = event_lines(first)
    assert events[0] == {"event": "resumed", "rank": 0, "step": 0, "total_steps": 30}
    steps = [e for e in events if e["event"] == "step"]
    assert [e["step"] for e in steps] == [5, 10, 12]  # every log_every (DEEPVM_LOG_EVERY), and the stop's
    logged = {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}
    assert [e["loss"] for e in steps[:2]] == [round(logged[5], 6), round(logged[10], 6)]  # the loss HF logged
    assert "deepvm:" not in warned

    checkpoint = get_last_checkpoint(str(out))  # as HF's examples resume
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    again = Trainer(model=Tiny(), args=_args(out), train_dataset=_data(256), callbacks=[DeepVMCallback()])
    again.train(resume_from_checkpoint=checkpoint)
    assert again.state.global_step == 30
    events = event_lines(capfd.readouterr().out)
    assert events[0] == {"event": "resumed", "rank": 0, "step": 12, "total_steps": 30}
    assert [e["step"] for e in events if e["event"] == "step"] == [15, 20, 25, 30]


def test_outside_deepvm_the_callback_does_nothing(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEEPVM_CHECKPOINT_DIR", raising=False)
    trainer = Trainer(model=Tiny(), args=_args(tmp_path / "out"), train_dataset=_data(64), callbacks=[DeepVMCallback()])
    trainer.train()
    assert trainer.state.global_step == 30 and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert not event_lines(capfd.readouterr().out)


@pytest.mark.parametrize(
    ("output_dir", "patterns", "kept"),
    [
        ("out", ["out"], True),
        ("out", ["out/"], True),
        ("out", ["./out"], True),
        ("runs/a", ["runs"], True),
        ("out", ["out/checkpoint-*"], True),
        ("runs/a", ["**/a"], True),
        ("runs/a", ["runs/**"], True),
        ("out", ["out/*.json"], False),
        ("out", ["other"], False),
        ("out", [], False),
        ("../out", ["out"], False),
        ("ckpt/hf", [], True),
    ],
)
def test_output_dir_is_kept_as_the_kept_files_match_it(tmp_path, monkeypatch, output_dir, patterns, kept):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEEPVM_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("DEEPVM_KEPT_FILES", json.dumps(patterns))
    assert output_dir_kept(Path(output_dir)) is kept


def test_a_train_whose_output_dir_is_not_kept_says_so_in_one_line(launched_here, monkeypatch, capfd):
    monkeypatch.setenv("DEEPVM_KEPT_FILES", "[]")
    args = _args(launched_here)
    args.max_steps = 2
    Trainer(model=Tiny(), args=args, train_dataset=_data(16), callbacks=[DeepVMCallback()]).train()
    (line,) = [x for x in capfd.readouterr().err.splitlines() if x.startswith("deepvm:")]
    assert f"output_dir {str(launched_here)!r} is not kept" in line and "checkpoint.files" in line


STEPS = HF_STEPS
HF_JOB = """\
name: hf-trainer
run: {script: train_hf.py, calls_step: false}
checkpoint: {files: [output], levels: [l1, l2]}
env: {OMP_NUM_THREADS: "1"}
"""


def _tagged(stdout: str, tag: str) -> dict[str, int]:
    return {
        rank: int(step)
        for rank, step in (line.split()[1:3] for line in stdout.splitlines() if line.startswith(tag + " "))
    }


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
def test_a_notice_stops_a_ddp_hf_trainer_with_its_checkpoint_and_every_rank_resumes_at_that_step(tmp_path, warm):
    (tmp_path / "train_hf.py").write_text(HF_SCRIPT)
    job = tmp_path / "job.yaml"
    job.write_text(HF_JOB)
    with imds_endpoint(tmp_path) as url:
        proc = launch_ranks(job, "trainer,trainer,holder", url, warm=warm)
        first, stderr = output_with_a_notice_at(
            proc, lambda line: is_step(line, 20), lambda: post_notice(tmp_path), timeout=120
        )
        events = event_lines(first)
        assert [e["status"] for e in events if e["event"] == "end"] == ["stopped"]
        stopped = _tagged(first, "DONE")
        assert len(stopped) == 2 and len(set(stopped.values())) == 1  # train() returned on both, at one step
        (n,) = set(stopped.values())
        assert 20 < n < STEPS
        assert [e["step"] for e in events if e["event"] == "step"][-1] == n  # the stop's step reported
        (flushed,) = [e for e in events if e["event"] == "kept" and e["how"] == "flushed"]
        assert flushed["newest"].startswith(f"job/output/checkpoint-{n}/")
        assert flushed["files"] == 7  # checkpoint-n (save_steps: 500, none before): 5 files, each rank's rng state
        assert "deepvm:" not in stderr  # output_dir is kept: no warning

        clear_notices(tmp_path)
        shutil.rmtree(tmp_path / "output")  # a new node has none: only the holders do
        second = launch_ranks(job, "trainer,trainer,holder", url, warm=warm)
        out, stderr = second.communicate(timeout=120)
    assert second.returncode == 0, stderr[-3000:]
    assert _tagged(out, "BEGIN") == {"0": n, "1": n}  # 0 steps lost, on every rank
    assert _tagged(out, "DONE") == {"0": STEPS, "1": STEPS}
    assert "Didn't find an RNG file" not in stderr  # each rank's own came back
    events = event_lines(out)
    assert [(e["step"], e["total_steps"]) for e in events if e["event"] == "resumed"] == [(n, STEPS)]
    assert [e["status"] for e in events if e["event"] == "end"] == ["completed"]
