"""Tiny job specs and helpers for running the worker in tests."""

from __future__ import annotations

import socket
from pathlib import Path

TINY = """\
name: tiny
seed: {seed}
model: {{name: resnet18, num_classes: 4}}
dataset: {{kind: synthetic, samples: 96, image_shape: [3, 16, 16], classes: 4, seed: 0}}
steps: {steps}
batch_size: 4
log_every: 2
optimizer: {{name: sgd, lr: 0.02, momentum: 0.9}}
schedule: {{name: cosine, warmup_steps: 1}}
"""


def tiny_job(folder: Path, steps: int = 6, seed: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tiny.yaml"
    path.write_text(TINY.format(steps=steps, seed=seed))
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
