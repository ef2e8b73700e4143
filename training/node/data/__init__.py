"""Datasets the worker trains on, built from the job spec's `dataset` section."""

from __future__ import annotations

from training.node.data.cifar10 import load_cifar10
from training.node.data.images import ImageDataset
from training.node.data.s3 import download_prefix
from training.node.data.synthetic import make_synthetic
from training.shared.jobspec import Cifar10Data, SyntheticData


def build_dataset(spec: SyntheticData | Cifar10Data, *, train: bool = True) -> ImageDataset:
    """The dataset a spec names; for an S3 source, download it into the cache first."""
    if isinstance(spec, SyntheticData):
        return make_synthetic(spec.samples, spec.image_shape, spec.classes, spec.seed)
    source = spec.path if spec.path is not None else download_prefix(str(spec.s3), spec.cache_dir)
    return load_cifar10(source, train=train, augment=spec.augment)


__all__ = ["ImageDataset", "build_dataset", "download_prefix", "load_cifar10", "make_synthetic"]
