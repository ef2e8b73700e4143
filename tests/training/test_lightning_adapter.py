"""Issue 36, finding 4: a Lightning script with `callbacks=[DeepVMCallback()]` (training.integrations.lightning)
reports its steps to deepvm, stops at deepvm's signal with `last.ckpt` at that very step and returns from
`fit`, and `fit(ckpt_path="last")` resumes there: in process, then under a real mpirun with a Spot notice, where
Lightning must see TorchElasticEnvironment and the relaunch must resume on every rank and not hang."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import lightning as L
import pytest
import torch
from framework_scripts import LIGHTNING_SCRIPT, LIGHTNING_STEPS
from imds import clear_notices, imds_endpoint, post_notice
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset
from worker_jobs import event_lines, is_step, launch_ranks, output_with_a_notice_at

from training.integrations.lightning import DeepVMCallback, is_kept

STOP_AT = 8  # the step whose training_step gets the stop signal


class Tiny(L.LightningModule):
    """A linear regression: the smallest module with an optimizer and a loss."""

    def __init__(self, signal_at: int | None = None) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.signal_at = signal_at

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.trainer.global_step + 1 == self.signal_at:
            os.kill(os.getpid(), signal.SIGTERM)  # what deepvm's rank sends at a notice, in the step's midst
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(
    root: Path, model: Tiny, max_steps: int, ckpt_path: str | None = None, dirpath: Path | None = None
) -> tuple[L.Trainer, DeepVMCallback]:
    """`model` fit on CPU as a user's script would, with the callback; ModelCheckpoint's directory `dirpath`
    (None: Lightning's default, the logger's)."""
    data = TensorDataset(torch.randn(64, 4, generator=torch.Generator().manual_seed(0)), torch.randn(64, 1))
    callback = DeepVMCallback()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        default_root_dir=root,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback, ModelCheckpoint(dirpath=dirpath)],
    )
    trainer.fit(model, DataLoader(data, batch_size=4), ckpt_path=ckpt_path)
    return trainer, callback


@pytest.fixture
def under_deepvm(tmp_path, monkeypatch) -> Path:
    """This process as a script deepvm launched: its kept directory, its log_every, its working directory."""
    kept = tmp_path / "kept"
    monkeypatch.setenv("DEEPVM_CHECKPOINT_DIR", str(kept))
    monkeypatch.setenv("DEEPVM_LOG_EVERY", "5")
    monkeypatch.setenv("DEEPVM_KEPT_FILES", "[]")
    monkeypatch.chdir(tmp_path)
    return kept


def test_the_stop_signal_saves_last_ckpt_at_that_step_and_fit_returns(tmp_path, under_deepvm, capsys):
    trainer, callback = _fit(tmp_path, Tiny(signal_at=STOP_AT), max_steps=40, dirpath=under_deepvm)
    assert (trainer.global_step, callback.stopped_at) == (STOP_AT, STOP_AT)
    last = under_deepvm / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == STOP_AT
    events = event_lines(capsys.readouterr().out)
    assert [(e["step"], e["total_steps"]) for e in events if e["event"] == "resumed"] == [(0, 40)]
    assert [e["step"] for e in events if e["event"] == "step"] == [5, STOP_AT]  # every 5, and the stop's
    assert all(e["loss"] > 0 for e in events if e["event"] == "step")  # the step's own MSE
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # Lightning put back the handler it found

    trainer, callback = _fit(tmp_path, Tiny(), max_steps=12, ckpt_path="last", dirpath=under_deepvm)
    events = event_lines(capsys.readouterr().out)
    assert [e["step"] for e in events if e["event"] == "resumed"] == [STOP_AT]
    assert [e["step"] for e in events if e["event"] == "step"] == [10, 12]  # the end, said though not a 5th
    assert all(e["loss"] > 0 for e in events if e["event"] == "step")
    assert (trainer.global_step, callback.stopped_at) == (12, None)


def test_a_checkpoint_directory_the_next_launch_would_not_find_is_warned_of(tmp_path, under_deepvm):
    with pytest.warns(UserWarning, match="a new directory at each launch") as warned:
        _fit(tmp_path, Tiny(), max_steps=2)
    assert any("is not kept: add it to the job's checkpoint.files" in str(w.message) for w in warned)


def test_outside_deepvm_the_callback_does_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DEEPVM_CHECKPOINT_DIR", raising=False)
    trainer, _ = _fit(tmp_path, Tiny(), max_steps=3)
    assert trainer.global_step == 3 and not event_lines(capsys.readouterr().out)
    assert trainer.checkpoint_callback is not None
    assert Path(trainer.checkpoint_callback.dirpath).is_relative_to(tmp_path / "lightning_logs")  # Lightning's own


@pytest.mark.parametrize(
    ("directory", "files", "kept"),
    [
        ("kept/checkpoints", [], True),  # under $DEEPVM_CHECKPOINT_DIR
        ("ckpts", [], False),
        ("ckpts", ["ckpts"], True),
        ("ckpts", ["./ckpts/"], True),
        ("runs/a/ckpts", ["runs"], True),  # a directory above it
        ("ckpts", ["ckpts/*.ckpt"], True),  # its files
        ("ckpts", ["other"], False),
    ],
)
def test_which_checkpoint_directories_deepvm_keeps(tmp_path, monkeypatch, directory, files, kept):
    monkeypatch.chdir(tmp_path)
    env = {"DEEPVM_CHECKPOINT_DIR": str(tmp_path / "kept"), "DEEPVM_KEPT_FILES": json.dumps(files)}
    assert is_kept(tmp_path / directory, env) is kept


STEPS = LIGHTNING_STEPS
JOB = """\
name: lightning-style
run: {script: train.py, calls_step: false}
checkpoint: {files: [checkpoints], levels: [l1, l2]}
log_every: 5
env: {OMP_NUM_THREADS: "1"}
"""


def _tagged(stdout: str, tag: str) -> dict[str, list[str]]:
    """Each rank's words after `tag`, by rank."""
    return {w[1]: w[2:] for w in (line.split() for line in stdout.splitlines()) if w and w[0] == tag}


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
def test_a_notice_stops_lightning_ddp_at_a_step_and_every_rank_resumes_there(tmp_path, warm):
    (tmp_path / "train.py").write_text(LIGHTNING_SCRIPT)
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    with imds_endpoint(tmp_path) as url:
        proc = launch_ranks(job, "trainer,trainer,holder", url, warm=warm)
        first, stderr = output_with_a_notice_at(
            proc, lambda line: is_step(line, 10), lambda: post_notice(tmp_path), timeout=120
        )
        assert "not kept" not in stderr and "a new directory at each launch" not in stderr  # checkpoint.files
        assert _tagged(first, "RESUMED") == {
            "0": ["0", "TorchElasticEnvironment"],
            "1": ["0", "TorchElasticEnvironment"],
        }
        events = event_lines(first)
        assert [e["status"] for e in events if e["event"] == "end"] == ["stopped"]
        stopped_at = [e["step"] for e in events if e["event"] == "step"][-1]
        assert 10 <= stopped_at < STEPS
        assert _tagged(first, "DONE") == {"0": [str(stopped_at)], "1": [str(stopped_at)]}  # fit returned on each
        last = tmp_path / "checkpoints" / "last.ckpt"
        assert torch.load(last, weights_only=False)["global_step"] == stopped_at

        clear_notices(tmp_path)
        for gone in ("checkpoints", "lightning_logs"):  # a new node has neither: only the holders have the checkpoint
            shutil.rmtree(tmp_path / gone)
        second = launch_ranks(job, "trainer,trainer,holder", url, warm=warm)
        out, stderr = second.communicate(timeout=120)
    assert second.returncode == 0, stderr[-3000:]
    assert _tagged(out, "RESUMED") == {
        "0": [str(stopped_at), "TorchElasticEnvironment"],
        "1": [str(stopped_at), "TorchElasticEnvironment"],
    }  # 0 steps lost
    events = event_lines(out)
    assert [e["step"] for e in events if e["event"] == "resumed"] == [stopped_at]
    assert [e["status"] for e in events if e["event"] == "end"] == ["completed"]
    assert _tagged(out, "DONE") == {"0": [str(STEPS)], "1": [str(STEPS)]}
