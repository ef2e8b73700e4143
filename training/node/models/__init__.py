"""Models the worker can train, by name."""

from training.node.models.resnet import ARCHITECTURES, ResNet, build_model

__all__ = ["ARCHITECTURES", "ResNet", "build_model"]
