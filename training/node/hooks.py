"""The seam where checkpointing plugs into the training loop, and the state it saves and restores.

DeepCheck (and anything else that wants to act between steps, such as an interruption watcher)
implements CheckpointHook; the worker calls it at fixed points with a TrainState it can snapshot.
The learning-rate schedule is a pure function of the step (training/node/schedule.py), and augmentation
draws from a generator seeded by (seed, step, rank), so model, optimizer, step and sampler position
are all a resumed run needs; the torch RNG state is saved too for user code that draws from it.

Call order on every rank: on_start once (after a resume, if any, and before the "start" event, so a
hook may restore state itself), on_step after every optimizer step, on_stop once when the loop ends
(reason: the EndStatus, completed or stopped). on_step may return True to end the run cleanly after that
step, like a stop signal; it must then do so on every rank at the same step (decide collectively, as
DeepCheck's should_flush() does), or the ranks would disagree on when to stop. Hooks run inside
the training loop: whatever blocks there blocks training, so a hook that copies state elsewhere
should snapshot to memory and hand off to a background thread.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from training.node.sampler import GlobalBatchSampler, SamplerPosition
from training.shared.events import EndStatus

STATE_FORMAT = 2  # 2 adds the loss curve; a format-1 checkpoint (no curve) still resumes


@dataclass
class TrainState:
    """Everything that changes while training, on one rank."""

    model: nn.Module  # the bare model (not the DDP wrapper): its keys do not depend on the wrapper
    optimizer: torch.optim.Optimizer
    sampler: GlobalBatchSampler
    step: int = 0  # optimizer steps completed
    # (step, loss averaged over the ranks) at each logged step. Saved with the checkpoint so that a job's
    # metrics hold its whole curve across restarts, and an attempt that resumes at the last step (it only
    # writes the outputs) still knows the final loss.
    loss_curve: list[tuple[int, float]] = field(default_factory=list)

    def state_dict(self) -> dict[str, Any]:
        """A picklable snapshot (tensors still shared with the live model: copy before training on)."""
        return {
            "format": STATE_FORMAT,
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "sampler": {"epoch": self.sampler.position.epoch, "offset": self.sampler.position.offset},
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
            "loss_curve": list(self.loss_curve),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``; the optimizer's learning rate is set again by the schedule."""
        if state.get("format") not in (1, STATE_FORMAT):
            raise ValueError(f"unknown train state format {state.get('format')!r}")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.sampler.position = SamplerPosition(**state["sampler"])
        self.step = int(state["step"])
        self.loss_curve = [(int(step), float(loss)) for step, loss in state.get("loss_curve", [])]
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])


class CheckpointHook(Protocol):
    """Called by the worker's training loop; see the module docstring for the order."""

    def on_start(self, state: TrainState) -> None: ...

    def on_step(self, state: TrainState, step: int) -> bool | None: ...

    def on_stop(self, state: TrainState, step: int, reason: EndStatus) -> None: ...
