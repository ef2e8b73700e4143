"""What trainer 0 tells the controller of its checkpoints' fate: safe, or never to be (training.node.checkpointing
for a step loop, training.node.launched for a launched script's kept files). DeepCheck is asked without
waiting (DeepCheck.completed, DeepCheck.failed), once a step or a tick."""

from __future__ import annotations

import deepcheck
from training.shared.checkpointplan import CheckpointPlan
from training.shared.events import Event, NotSafe, Safe


class SafetyWatch:
    """What trainer 0 tells the controller of its checkpoints' fate, asked of DeepCheck without waiting: Safe
    when a newer one is complete at the plan's safe_level (the step `status` claims), NotSafe once for each
    checkpoint the lead said will never reach a lasting level (a full disk: the claim stays at the older).
    `claims`: False for a launched script's kept files, whose versions are no steps (training.node.launched):
    only what is not safe is told."""

    def __init__(self, ck: deepcheck.DeepCheck, plan: CheckpointPlan, claims: bool = True) -> None:
        self.ck, self.plan, self.claims = ck, plan, claims
        self.safe: deepcheck.CheckpointId | None = None
        self.told: dict[deepcheck.Level, deepcheck.CheckpointId] = {}

    def news(self) -> list[Event]:
        found: list[Event] = []
        for level in self.plan.lasting_levels:
            failure = self.ck.failed(level)
            if failure is not None and failure.ckpt != self.told.get(level):
                self.told[level] = failure.ckpt
                found.append(NotSafe(rank=0, step=failure.ckpt.step, level=level.name, reason=failure.reason))
        safe = self.ck.completed(self.plan.safe_level) if self.claims else None
        if safe is not None and (self.safe is None or safe > self.safe):
            self.safe = safe
            found.append(Safe(rank=0, step=safe.step, level=self.plan.safe_level.name))
        return found
