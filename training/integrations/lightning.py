"""deepvm's one line for a Lightning script: `L.Trainer(..., callbacks=[DeepVMCallback()])`.

A Lightning script deepvm launches (run.calls_step: false) runs as under torchrun (training.node.elastic_env):
Lightning picks TorchElasticEnvironment and no launcher of its own. The callback adds what deepvm needs:

- progress: Resumed at the start and a Step every log_every optimizer steps, with the loss, from trainer 0
  (training.integrations.protocol), so progress, `deepvm watch` and the lost steps count Lightning's steps;
- a stop that loses nothing: at deepvm's stop signal (a Spot notice, a cancel) the first optimizer step that
  ends on every rank after it writes `last.ckpt` in the ModelCheckpoint's directory and ends training
  (`trainer.should_stop`), so `fit` returns and the script exits by itself within its grace; the relaunch's
  `trainer.fit(model, ckpt_path="last")` finds that file on every rank and goes on at that very step;
- a kept directory: `ckpt_path="last"` looks in the ModelCheckpoint's directory as it is when `fit` is called,
  before any callback runs, so that directory must be the same at every launch and kept by deepvm. Lightning's
  default, the logger's `version_N/checkpoints`, is a new one at each launch (the previous launch's is version
  N-1), and Lightning itself would not resume from it; a directory the script names, as Lightning's own
  examples of resuming do (`ModelCheckpoint(dirpath=...)`, or `logger=False` for `default_root_dir/checkpoints`),
  is the same. deepvm keeps it when it lies under $DEEPVM_CHECKPOINT_DIR or the job's `checkpoint.files` names
  it (then every checkpoint ModelCheckpoint writes is kept too: what a node lost without a notice resumes
  from). Trainer 0 warns at the start when either is not so: the callback cannot move the directory where
  the next launch's `fit` would look.

Why the callback takes the stop signal from Lightning: Lightning 2.x (trainer/connectors/signal_connector.py)
answers SIGTERM, torchelastic's and deepvm's default, with a SIGTERMException (SystemExit) at the next batch, so
`fit` never returns and no checkpoint is written at the stop: the relaunch goes back to the last periodic one
(under deepvm's mpirun, with `every_n_train_steps=5`, it came back at step 15, its last one). Its handler
also calls `dist.broadcast` from inside the signal handler, a collective issued wherever the main thread was
interrupted, which can pair with another one (DDP's all-reduce, the loop's own per-batch broadcast) on a peer.
The callback sets its own handler once Lightning has set its own (on_train_start; Lightning puts back the
handlers it found when `fit` ends), and the ranks agree on stopping in one all-reduce at every optimizer step,
as Lightning's per-batch broadcast would, so that every rank saves and stops after the same step. A signal
before on_train_start (during setup or the sanity check) still meets Lightning's handler: no step of this
launch is lost then.

Outside deepvm (no $DEEPVM_CHECKPOINT_DIR) the callback does nothing: the script runs as it would without it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.data import extract_batch_size
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from training.integrations.protocol import StepReporter, StopFlag, kept, under_deepvm

CHECKPOINTS = "checkpoints"  # under default_root_dir: where the stop's checkpoint goes without a ModelCheckpoint


class DeepVMCallback(pl.Callback):
    """Steps to deepvm, and `last.ckpt` at its stop signal; see the module docstring."""

    def __init__(self) -> None:
        self.active = under_deepvm()
        self.stopped_at: int | None = None  # the step the stop signal ended training at
        self._flag: StopFlag | None = None
        self._reporter: StepReporter | None = None
        self._step = 0  # the last optimizer step seen
        self._samples = 0  # this rank's samples since that step
        self._loss: torch.Tensor | None = None  # that step's, on the device: read only when said
        self._named_dir = False  # the script chose the ModelCheckpoint's directory (setup)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Note whether the script named the ModelCheckpoint's directory, before its own setup (Lightning runs
        ModelCheckpoints' hooks after every other callback's) fills in the default."""
        callback = trainer.checkpoint_callback
        self._named_dir = isinstance(callback, ModelCheckpoint) and callback.dirpath is not None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.active:
            return
        self._flag = StopFlag().install()  # over Lightning's handler, which fit set just before
        self._reporter = StepReporter()
        self._step, self._samples, self._loss = trainer.global_step, 0, None
        total = trainer.max_steps if trainer.max_steps > 0 else trainer.estimated_stepping_batches
        self._reporter.resumed(trainer.global_step, int(total) if math.isfinite(total) else 0)
        directory = last_checkpoint(trainer).parent
        if trainer.checkpoint_callback is None:
            rank_zero_warn(
                f"no ModelCheckpoint: deepvm saves {directory}/last.ckpt at a stop, where "
                "fit(ckpt_path='last') does not look"
            )
        elif not self._named_dir and trainer.loggers:
            rank_zero_warn(
                f"{directory} is the logger's, a new directory at each launch, where the next "
                "fit(ckpt_path='last') will not look: name one, ModelCheckpoint(dirpath=...)"
            )
        if not is_kept(directory, os.environ):
            rank_zero_warn(
                f"{directory} is not kept: add it to the job's checkpoint.files, or a relaunch on "
                "another node starts without its checkpoints"
            )

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._reporter is None or self._flag is None:
            return
        self._samples += _batch_size(batch)
        if trainer.global_step == self._step:
            return  # gradients accumulate: no optimizer step ended, and no rank may stop here
        self._step = trainer.global_step
        stopping = trainer.strategy.reduce_boolean_decision(self._flag.asked, all=False)
        self._loss = _loss(outputs)
        self._report(trainer.current_epoch, last=stopping)
        if stopping:
            trainer.save_checkpoint(last_checkpoint(trainer))
            trainer.should_stop = True
            self.stopped_at = self._step

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The last step of a run that ended by itself (max_steps, max_epochs, early stopping), if not said yet."""
        if self._reporter is not None and self.stopped_at is None and self._step % self._reporter.log_every:
            self._report(trainer.current_epoch, last=True)
        self._reporter = None

    def _report(self, epoch: int, *, last: bool) -> None:
        assert self._reporter is not None
        said = last or self._step % self._reporter.log_every == 0
        loss = float(self._loss.float().item()) if said and self._loss is not None else None  # .item() syncs
        self._reporter.step(self._step, loss, samples=self._samples, epoch=epoch, last=last)
        self._samples = 0


def last_checkpoint(trainer: pl.Trainer) -> Path:
    """Where the stop's checkpoint goes: `last.ckpt` (as the ModelCheckpoint names it) in its directory, where
    `ckpt_path="last"` finds it; with no ModelCheckpoint, where Lightning's default one would save."""
    callback = trainer.checkpoint_callback
    if isinstance(callback, ModelCheckpoint) and callback.dirpath is not None:
        return Path(callback.dirpath) / f"{callback.CHECKPOINT_NAME_LAST}{callback.FILE_EXTENSION}"
    return Path(trainer.default_root_dir) / CHECKPOINTS / "last.ckpt"


def is_kept(directory: Path, environ: Mapping[str, str]) -> bool:
    """Whether deepvm keeps the last.ckpt the callback writes in `directory`."""
    return kept(directory / "last.ckpt", environ)


def _loss(outputs: Any) -> torch.Tensor | None:
    """The loss training_step returned (a tensor, or a mapping's "loss"); None where it returned none."""
    loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
    return loss.detach() if isinstance(loss, torch.Tensor) and loss.numel() == 1 else None


def _batch_size(batch: Any) -> int:
    """The batch's samples as Lightning counts them for its logs (0 where it finds no tensor)."""
    try:
        return extract_batch_size(batch)
    except MisconfigurationException:
        return 0
