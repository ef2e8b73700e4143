"""The standard CIFAR augmentation as batched torch ops: random crop with zero padding, then a flip."""

from __future__ import annotations

import torch


def augment_batch(x: torch.Tensor, generator: torch.Generator | None = None, pad: int = 4) -> torch.Tensor:
    """Random ``pad``-pixel-shifted crop and random horizontal flip of each image in (N, C, H, W).

    Equivalent to torchvision's RandomCrop(H, padding=pad) + RandomHorizontalFlip(), one draw per image.
    """
    n, c, h, w = x.shape
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    rows = (dy[:, None] + torch.arange(h))[:, None, :, None]
    cols = (dx[:, None] + torch.arange(w))[:, None, None, :]
    cropped = padded[torch.arange(n)[:, None, None, None], torch.arange(c)[None, :, None, None], rows, cols]
    flip = torch.rand(n, generator=generator) < 0.5
    return torch.where(flip[:, None, None, None], cropped.flip(3), cropped)
