"""Hugging Face's Trainer under deepvm in one line: `Trainer(..., callbacks=[DeepVMCallback()])`.

What the callback does for a script deepvm launched (run.calls_step: false; training.integrations.protocol):

- reports HF's steps as deepvm's: Resumed at train begin (the step HF resumed at), then a Step every log_every
  steps with the loss HF logged, and at the last step (the end, or a stop), so progress, `deepvm watch` and
  the lost steps count this script's steps;
- at deepvm's stop signal (a Spot notice, a cancel) it asks HF, at a step's end, to save its own checkpoint
  (`checkpoint-N` in args.output_dir: the model, optimizer, scheduler, trainer_state.json and each rank's
  rng_state_R.pth) and to stop training, so `trainer.train()` returns and the script ends by itself: the kept
  files then hold step N, and the relaunch loses none. HF's examples already resume from
  `get_last_checkpoint(args.output_dir)`, which finds it on every rank, since deepvm puts the kept files back
  on every trainer before each launch.

For that args.output_dir must be kept: named in the job's checkpoint.files, or under $DEEPVM_CHECKPOINT_DIR:

    run: {script: train.py, calls_step: false}
    checkpoint: {files: [output]}  # TrainingArguments(output_dir="output", ...), relative to the job directory

A job that forgets it runs well until its first notice, which then loses all progress (HF's "Can't find a
valid checkpoint" at the relaunch), so the callback says so in one line on stderr at train begin (the rank
gives the job's patterns as DEEPVM_KEPT_FILES). It does not move output_dir itself: the script's own
get_last_checkpoint call, made before the Trainer exists, would then look in the wrong place.

Only the callback takes the stop signal: HF's own handler (TrainingArguments.enable_jit_checkpoint, off by
default, set in Trainer.__init__) is replaced at train begin, or each rank would also save on its own after
a 3 s timer, at a step of its own. Outside deepvm the callback does nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from training.integrations.protocol import StepReporter, StopFlag, kept, under_deepvm


class DeepVMCallback(TrainerCallback):
    """deepvm's reports and stop for HF's Trainer; see the module docstring."""

    def __init__(self) -> None:
        self.active = under_deepvm()
        self.flag = StopFlag()
        self.reporter = StepReporter()
        self.loss: float | None = None  # the loss HF logged last
        self.reported = -1  # the step last handed to the reporter
        self.vote: _StopVote | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if not self.active:
            return
        self.flag.install()  # after Trainer.__init__, where HF's own JIT handler is set: deepvm's wins
        if self.vote is None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            self.vote = _StopVote()
        if state.is_world_process_zero and not output_dir_kept(Path(args.output_dir)):
            print(
                f"deepvm: output_dir {args.output_dir!r} is not kept, so a notice loses HF's checkpoints: add it "
                "to the job's checkpoint.files, or put it under $DEEPVM_CHECKPOINT_DIR",
                file=sys.stderr,
            )
        self.reporter.resumed(state.global_step, state.max_steps)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """Stop with HF's checkpoint once every rank agrees the signal came; report the step, unless HF logs this
        step's loss right after (on_log reports it then)."""
        if not self.active:
            return
        stop = self.flag.asked if self.vote is None else self.vote.agreed(self.flag.asked)
        if stop:
            control.should_save = True
            control.should_training_stop = True
        if not control.should_log:
            self._report(args, state, last=control.should_training_stop)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if not self.active or not logs or "loss" not in logs:
            return
        self.loss = float(logs["loss"])
        self._report(args, state, last=control.should_training_stop)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.vote is not None:
            self.vote.close()
            self.vote = None

    def _report(self, args: TrainingArguments, state: TrainerState, *, last: bool) -> None:
        if state.global_step == self.reported:
            return
        self.reported = state.global_step
        samples = args.per_device_train_batch_size * args.gradient_accumulation_steps
        self.reporter.step(
            state.global_step,
            self.loss,
            samples=samples,
            epoch=None if state.epoch is None else int(state.epoch),
            last=last,
        )


class _StopVote:
    """The ranks' agreement on stopping, so that all stop at the same step: a rank that stopped alone would leave
    the others waiting in DDP's next all-reduce, and its checkpoint would miss their rng states.

    Each step's end starts an all-reduce (MAX) of this rank's flag and reads the one started at the step before,
    by then long done: the same answer on every rank, one step after the first rank saw the signal, at no wait.
    Over a gloo group of its own, on the CPU: a CUDA tensor's .item() would wait for the step's kernels."""

    def __init__(self) -> None:
        self.group = dist.new_group(backend="gloo")  # collective: every rank is at train begin
        self.pending: tuple[dist.Work, torch.Tensor] | None = None

    def agreed(self, asked: bool) -> bool:
        """Whether any rank had the signal at the previous step's end (every rank calls this at each step's end)."""
        stop = self.settle()
        flag = torch.tensor([int(asked)], dtype=torch.int32)
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        assert work is not None
        self.pending = work, flag
        return stop

    def close(self) -> None:
        """Settle the vote and destroy its group now, while the script runs: left to the interpreter's exit, a gloo
        group's threads met a torn-down process there ("terminate called without an active exception", SIGABRT:
        one relaunch in CI's suite), and the job failed at its very end."""
        self.settle()
        dist.destroy_process_group(self.group)

    def settle(self) -> bool:
        """Wait for the vote under way (at train end: none may outlive the training); whether it said stop."""
        if self.pending is None:
            return False
        work, flag = self.pending
        self.pending = None
        work.wait()
        return bool(flag.item())


def output_dir_kept(output_dir: Path) -> bool:
    """Whether HF's checkpoints in output_dir (its checkpoint-N directories) are kept whole."""
    return kept(output_dir / f"{PREFIX_CHECKPOINT_DIR}-1")
