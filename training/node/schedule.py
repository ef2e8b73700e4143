"""Learning rate as a pure function of the step, so a resumed or rescaled run needs no scheduler state."""

from __future__ import annotations

import math

import torch

from training.shared.jobspec import OptimizerSpec, ScheduleSpec


def lr_factor(spec: ScheduleSpec, step: int, total_steps: int) -> float:
    """Multiplier of the base learning rate for the optimizer step numbered ``step`` (0-based).

    Linear warmup over ``warmup_steps`` (from 0, or for onecycle from 1/25), then: none: 1; step:
    gamma every step_every steps; cosine: half a cosine down to min_lr_ratio; onecycle: cosine down
    to 1/10^4 of the peak (the shape of Smith's one-cycle policy, without momentum cycling).
    """
    warmup = min(spec.warmup_steps, max(total_steps - 1, 0))
    floor = 1 / 25 if spec.name == "onecycle" else 0.0
    if step < warmup:
        return floor + (1 - floor) * (step + 1) / warmup
    after = step - warmup
    span = max(total_steps - warmup, 1)
    progress = min(after / span, 1.0)
    if spec.name == "step":
        return spec.gamma ** (after // spec.step_every)
    if spec.name == "cosine":
        return spec.min_lr_ratio + (1 - spec.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    if spec.name == "onecycle":
        return 1e-4 + (1 - 1e-4) * 0.5 * (1 + math.cos(math.pi * progress))
    return 1.0


def build_optimizer(spec: OptimizerSpec, params, lr: float) -> torch.optim.Optimizer:
    """The spec's optimizer at learning rate ``lr`` (the spec's lr, possibly rescaled)."""
    if spec.name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=spec.momentum, weight_decay=spec.weight_decay)
    betas = (spec.momentum, 0.999)
    if spec.name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=betas, weight_decay=spec.weight_decay)
    return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=spec.weight_decay)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
