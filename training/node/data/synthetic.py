"""Synthetic CIFAR-shaped data for rehearsals: deterministic from a seed and actually learnable.

Each class gets a smooth random colour pattern (a coarse random grid, upsampled); an image is its
class pattern, randomly shifted in brightness, plus pixel noise. A ResNet separates the classes within
a few dozen steps, so a rehearsal shows a falling loss curve, yet single pixels are too noisy to
memorise trivially. Every node generates the identical set from the seed: nothing is downloaded.
"""

from __future__ import annotations

import torch

from training.node.data.images import ImageDataset


def make_synthetic(
    samples: int, image_shape: tuple[int, int, int] = (3, 32, 32), classes: int = 10, seed: int = 0
) -> ImageDataset:
    """``samples`` images of ``image_shape`` in ``classes`` balanced classes, labelled synthetic."""
    c, h, w = image_shape
    gen = torch.Generator().manual_seed(seed)
    coarse = torch.rand(classes, c, 4, 4, generator=gen) * 2 - 1
    patterns = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)
    labels = torch.randperm(samples, generator=gen) % classes
    brightness = torch.randn(samples, 1, 1, 1, generator=gen) * 0.1
    noise = torch.randn(samples, c, h, w, generator=gen) * 0.25
    pixels = 0.5 + 0.3 * patterns[labels] + brightness + noise
    images = (pixels.clamp(0, 1) * 255).round().to(torch.uint8)
    as_float = images.to(torch.float32) / 255
    mean = as_float.mean(dim=(0, 2, 3)).tolist()
    std = as_float.std(dim=(0, 2, 3)).tolist()
    return ImageDataset(images, labels, mean, std, augment=False, synthetic=True)
