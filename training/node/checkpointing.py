"""DeepCheck in the training loop: the job's checkpoint policy, for deepvm's worker and for user scripts.

Checkpointer turns the job spec's `checkpoint:` policy into DeepCheck calls on any state tree, so the
worker (through DeepCheckHook) and a user's own script (through training.job) checkpoint, flush and
restore by the same rules:

- restore: the newest complete checkpoint, if any (collective over trainers). The world may be smaller
  or larger than the one that saved it: the tree is replicated state (DDP), the same on every trainer.
- a Spot notice from the node's watcher (`noticed`, from the watcher's thread): an interruption notice asks
  DeepCheck to flush (`request_flush`); a rebalance recommendation asks for an early checkpoint, and the
  run goes on (why: training.control.attempts, "A rebalance recommendation");
- after every step: one collective (so every trainer agrees at the same step) turns an interruption notice
  seen by any trainer into `flush_now()`, and the run must end; a recommendation seen by any trainer into
  `flush_now()` too (safe on the holders, so an interruption that follows without its two minutes costs
  nothing since), and the run goes on; otherwise `save()` when a checkpoint is due (every N steps, or every
  T seconds as agreed by all trainers).
- on a clean stop (the controller folding in a new node, Ctrl-C): flush the last step unless it is
  saved already, so a clean stop never loses a step.

The state tree is asked for only when a checkpoint is taken (a callable), so a step without one costs
one tiny collective (two with every_seconds). Progress goes out from trainer 0 as training.shared.events:
Restored, Saved, Flush.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

import deepcheck
from training.node.hooks import TrainState
from training.node.safety import SafetyWatch
from training.node.trainercomm import TrainerComm
from training.shared.checkpointplan import CheckpointPlan
from training.shared.events import EndStatus, Event, Flush, FlushReason, Notice, Restored, Saved, emit

Tree = Callable[[], Any]  # builds the state tree to save, called only when one is saved


class Checkpointer:
    """One trainer's side of the job's checkpoint policy; see the module docstring."""

    def __init__(
        self,
        ck: deepcheck.DeepCheck,
        policy: CheckpointPlan,
        trainers: TrainerComm,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ck, self.policy, self.trainers, self.clock = ck, policy, trainers, clock
        self.saved_step = -1  # newest step saved or flushed by this run (or restored from)
        self.last_save_at = clock()
        self._early = threading.Event()  # a rebalance recommendation asks for a checkpoint at the next step
        self.safety = SafetyWatch(ck, policy) if trainers.rank == 0 else None

    def noticed(self, notice: Notice) -> None:
        """A Spot notice on this trainer's node (thread-safe: the watcher's thread calls it)."""
        if notice.is_interruption:
            self.ck.request_flush()
        else:
            self._early.set()

    def restore(self) -> deepcheck.Restored | None:
        """Collective over trainers: the newest complete checkpoint (this rank's RNG restored too), or None."""
        started = time.perf_counter()
        restored = self.ck.restore()
        if restored is None:
            return None
        self.saved_step = restored.info.step
        self._report(
            Restored(
                rank=self.trainers.rank,
                step=restored.info.step,
                checkpoint=restored.info.ckpt.name,
                levels=tuple(level.name for level in restored.info.levels),
                seconds=round(time.perf_counter() - started, 3),
                fallbacks=tuple(restored.fallbacks),
            )
        )
        return restored

    def after_step(self, step: int, tree: Tree, epoch: int | None) -> bool:
        """Collective, once per step on every trainer: True (after flushing) when the run must end now."""
        self.tell_safety()
        interrupted, recommended = self.trainers.any_each(self.ck.flush_requested, self._early.is_set())
        if interrupted:
            self.flush(step, tree, epoch, reason=FlushReason.NOTICE)
            return True
        if recommended:
            self._early.clear()
            if self.saved_step < step:
                self.flush(step, tree, epoch, reason=FlushReason.REBALANCE)
            return False
        if self._due(step):
            handle = self.ck.save(tree(), step, epoch=epoch)
            self.saved_step, self.last_save_at = step, self.clock()
            self._report(
                Saved(rank=self.trainers.rank, step=step, stall_s=round(handle.stall_s, 4), bytes=handle.nbytes)
            )
        return False

    def tell_safety(self) -> None:
        """Trainer 0: what became of the checkpoints since the last look (training.node.safety); also once
        after DeepCheck closed, when the last one has settled."""
        for news in self.safety.news() if self.safety is not None else ():
            emit(news)

    def stopped(self, step: int, tree: Tree, epoch: int | None) -> None:
        """Collective: the run stops cleanly after `step`; flush it unless it is checkpointed already."""
        if self.saved_step < step:
            self.flush(step, tree, epoch, reason=FlushReason.STOP)

    def flush(self, step: int, tree: Tree, epoch: int | None, reason: FlushReason) -> None:
        report = self.ck.flush_now(tree(), step, epoch=epoch)
        self.saved_step, self.last_save_at = step, self.clock()
        self._report(
            Flush(
                rank=self.trainers.rank,
                step=step,
                reason=reason,
                level=report.level.name,
                seconds=round(report.seconds, 3),
                stall_s=round(report.stall_s, 4),
            )
        )

    def _due(self, step: int) -> bool:
        every_steps, every_seconds = self.policy.every_steps, self.policy.every_seconds
        if every_steps is not None and step % every_steps == 0:
            return True
        if every_seconds is None:
            return False
        # trainers' clocks differ: save when any of them says it is time, so all save the same step
        return self.trainers.any(self.clock() - self.last_save_at >= every_seconds)

    def _report(self, event: Event) -> None:
        if self.trainers.rank == 0:
            emit(event)


class DeepCheckHook:
    """The worker's CheckpointHook: its TrainState through a Checkpointer."""

    def __init__(self, checkpointer: Checkpointer) -> None:
        self.checkpointer = checkpointer

    def on_start(self, state: TrainState) -> None:
        restored = self.checkpointer.restore()
        if restored is not None:
            tree = dict(restored.state)
            tree["rng"] = _current_rng()  # DeepCheck restored this rank's own RNG; keep it
            state.load_state_dict(tree)

    def on_step(self, state: TrainState, step: int) -> bool:
        return self.checkpointer.after_step(step, lambda: _saved_tree(state), state.sampler.epoch)

    def on_stop(self, state: TrainState, step: int, reason: EndStatus) -> None:
        if reason is EndStatus.STOPPED:
            self.checkpointer.stopped(step, lambda: _saved_tree(state), state.sampler.epoch)


def _saved_tree(state: TrainState) -> dict[str, Any]:
    """The replicated state every trainer saves alike; RNG is per rank, and DeepCheck keeps it per rank."""
    tree = state.state_dict()
    del tree["rng"]
    return tree


def _current_rng() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}
