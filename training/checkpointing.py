"""DeepCheck in the training loop: the CheckpointHook that saves, restores and flushes on a notice.

Why a hook and not code in the worker: the worker trains the same with or without DeepCheck (tests run
it alone); the hook turns the job spec's checkpoint policy into DeepCheck calls at the three points
the worker offers:

- on_start: restore the newest complete checkpoint, if any (collective over trainers). The world may
  be smaller or larger than the one that saved it: the state is the replicated DDP state plus the
  sampler's global position, both independent of the number of trainers.
- on_step: `should_flush()` (collective, so every trainer agrees at the same step) turns an
  interruption notice seen by any trainer into `flush_now()` and ends the run; otherwise `save()` when
  a checkpoint is due (every N steps, or every T seconds as agreed by all trainers).
- on_stop: a run stopped for another reason (the controller folding in a new node, Ctrl-C) is
  flushed at its last step too, so a clean stop never loses a step.

Progress goes out as the worker's JSON lines (from trainer 0): "restored", "saved", "flush".
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

import deepcheck
from training.hooks import TrainState
from training.jobspec import CheckpointSpec

Emit = Callable[..., None]  # worker.emit(event, rank, **fields)


class DeepCheckHook:
    """Checkpoints one trainer's TrainState through DeepCheck; see the module docstring."""

    def __init__(
        self,
        ck: deepcheck.DeepCheck,
        policy: CheckpointSpec,
        rank: int,
        emit: Emit,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ck, self.policy, self.rank, self.emit, self.clock = ck, policy, rank, emit, clock
        self.saved_step = -1  # newest step saved or flushed by this run (or restored from)
        self.last_save_at = clock()

    # --- CheckpointHook ---------------------------------------------------------------------------
    def on_start(self, state: TrainState) -> None:
        started = time.perf_counter()
        restored = self.ck.restore()
        if restored is None:
            return
        tree = dict(restored.state)
        tree["rng"] = _current_rng()  # DeepCheck restored this rank's own RNG; keep it
        state.load_state_dict(tree)
        self.saved_step = state.step
        self._report(
            "restored",
            step=state.step,
            checkpoint=restored.info.ckpt.name,
            levels=[level.name for level in restored.info.levels],
            seconds=round(time.perf_counter() - started, 3),
            fallbacks=restored.fallbacks,
        )

    def on_step(self, state: TrainState, step: int) -> bool:
        if self.ck.should_flush():
            self._flush(state, step, reason="notice")
            return True
        if self._due(state, step):
            handle = self.ck.save(_saved_tree(state), step, epoch=state.sampler.epoch)
            self.saved_step, self.last_save_at = step, self.clock()
            self._report("saved", step=step, stall_s=round(handle.stall_s, 4), bytes=handle.nbytes)
        return False

    def on_stop(self, state: TrainState, step: int, reason: str) -> None:
        if reason == "stopped" and self.saved_step < step:
            self._flush(state, step, reason="stop")

    # --- helpers ----------------------------------------------------------------------------------
    def _due(self, state: TrainState, step: int) -> bool:
        every_steps, every_seconds = self.policy.every_steps, self.policy.every_seconds
        if every_steps is not None and step % every_steps == 0:
            return True
        if every_seconds is None:
            return False
        # trainers' clocks differ: save when any of them says it is time, so all save the same step
        late = self.clock() - self.last_save_at >= every_seconds
        device = next(state.model.parameters()).device
        flag = torch.tensor([1 if late else 0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def _flush(self, state: TrainState, step: int, reason: str) -> None:
        report = self.ck.flush_now(_saved_tree(state), step, epoch=state.sampler.epoch)
        self.saved_step, self.last_save_at = step, self.clock()
        self._report(
            "flush",
            step=step,
            reason=reason,
            level=report.level.name,
            seconds=round(report.seconds, 3),
            stall_s=round(report.stall_s, 4),
        )

    def _report(self, event: str, **fields: Any) -> None:
        if self.rank == 0:
            self.emit(event, self.rank, **fields)


def _saved_tree(state: TrainState) -> dict[str, Any]:
    """The replicated state every trainer saves alike; RNG is per rank, and DeepCheck keeps it per rank."""
    tree = state.state_dict()
    del tree["rng"]
    return tree


def _current_rng() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}
