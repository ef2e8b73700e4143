"""An in-memory image classification dataset: uint8 images, int64 labels, normalised on the way out.

CIFAR-10 (150 MB as uint8) and the synthetic set both fit in memory, so batches are gathered with one
index operation instead of a DataLoader and worker processes, and the random augmentation draws from
a generator the caller owns: a resumed run can reproduce the exact batch it would have seen.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import Dataset

from training.node.data.augment import augment_batch


class ImageDataset(Dataset):
    """Images (N, C, H, W) uint8 and labels (N,) int64 with per-channel normalisation."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        mean: Sequence[float],
        std: Sequence[float],
        *,
        augment: bool,
        synthetic: bool,
        class_names: Sequence[str] = (),
    ) -> None:
        if images.dtype != torch.uint8 or images.dim() != 4:
            raise ValueError(f"images must be uint8 (N, C, H, W), got {images.dtype} {tuple(images.shape)}")
        if labels.shape != (images.shape[0],):
            raise ValueError(f"{images.shape[0]} images but labels of shape {tuple(labels.shape)}")
        self.images = images
        self.labels = labels.to(torch.int64)
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        self.augment = augment  # random crop (pad 4) + horizontal flip in batch()
        self.synthetic = synthetic  # generated data: reports must say so
        self.class_names = tuple(class_names)

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.batch([index])
        return x[0], y[0]

    def batch(
        self, indices: Sequence[int] | torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The normalised (and, if enabled, augmented) images and labels at ``indices``."""
        index = torch.as_tensor(indices, dtype=torch.int64)
        x = self.images[index].to(torch.float32).div_(255.0)
        if self.augment:
            x = augment_batch(x, generator)
        return (x - self.mean) / self.std, self.labels[index]
