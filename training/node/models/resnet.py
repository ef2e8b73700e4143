"""ResNet for 32x32 images (He et al. 2016, with the CIFAR stem): torchvision is not a dependency.

The ImageNet stem (7x7 stride-2 conv + max-pool) would shrink a 32x32 image to 8x8 before the first
block; CIFAR variants use a single 3x3 stride-1 conv instead, so the four stages see 32, 16, 8 and 4
pixels. Shortcuts are identity where shapes match, else a 1x1 conv + BN (option B of the paper).
"""

from __future__ import annotations

from torch import Tensor, nn

from provisioning.core.errors import InputError


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [
        nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(c_out),
    ]


def _shortcut(c_in: int, c_out: int, stride: int) -> nn.Module:
    if stride == 1 and c_in == c_out:
        return nn.Identity()
    return nn.Sequential(*_conv_bn(c_in, c_out, 1, stride))


class BasicBlock(nn.Module):
    """Two 3x3 convs; used by ResNet-18 and -34."""

    expansion = 1

    def __init__(self, c_in: int, width: int, stride: int) -> None:
        super().__init__()
        c_out = width * self.expansion
        self.body = nn.Sequential(*_conv_bn(c_in, width, 3, stride), nn.ReLU(inplace=True), *_conv_bn(width, c_out, 3))
        self.shortcut = _shortcut(c_in, c_out, stride)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride), 1x1 expand by 4; used by ResNet-50."""

    expansion = 4

    def __init__(self, c_in: int, width: int, stride: int) -> None:
        super().__init__()
        c_out = width * self.expansion
        self.body = nn.Sequential(
            *_conv_bn(c_in, width, 1),
            nn.ReLU(inplace=True),
            *_conv_bn(width, width, 3, stride),
            nn.ReLU(inplace=True),
            *_conv_bn(width, c_out, 1),
        )
        self.shortcut = _shortcut(c_in, c_out, stride)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """Stem, four stages of residual blocks (widths w, 2w, 4w, 8w; the paper's w is 64), global average pool,
    linear classifier."""

    def __init__(
        self, block: type[BasicBlock | Bottleneck], depths: tuple[int, ...], num_classes: int, width: int = 64
    ):
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, width, 3), nn.ReLU(inplace=True))
        stages: list[nn.Module] = []
        c_in = width
        for i, (stage_width, depth) in enumerate(zip((width, 2 * width, 4 * width, 8 * width), depths, strict=True)):
            blocks: list[nn.Module] = []
            for j in range(depth):
                blocks.append(block(c_in, stage_width, stride=2 if i > 0 and j == 0 else 1))
                c_in = stage_width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.pool(self.stages(self.stem(x))).flatten(1))


ARCHITECTURES: dict[str, tuple[type[BasicBlock | Bottleneck], tuple[int, ...]]] = {
    "resnet18": (BasicBlock, (2, 2, 2, 2)),
    "resnet34": (BasicBlock, (3, 4, 6, 3)),
    "resnet50": (Bottleneck, (3, 4, 6, 3)),
}


def build_model(name: str, num_classes: int = 10, width: int = 64) -> ResNet:
    """A freshly initialised ResNet (weights from torch's current RNG: seed it first for reproducibility).
    `width` is the first stage's channels: parameters and compute grow with its square, so 16 is a sixteenth
    of ResNet-18's 11.2 M parameters, for small images, rehearsals and tests."""
    if name not in ARCHITECTURES:
        raise InputError(f"unknown model {name!r}; choose one of {', '.join(ARCHITECTURES)}")
    block, depths = ARCHITECTURES[name]
    return ResNet(block, depths, num_classes, width)
