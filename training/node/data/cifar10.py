"""CIFAR-10, python version (https://www.cs.toronto.edu/~kriz/cifar.html), read as published.

The data arrives as ``cifar-10-python.tar.gz`` or its extracted ``cifar-10-batches-py/`` directory:
five training batches and a test batch, each a pickled dict with b"data" (uint8, N x 3072, channel-
major 32x32 planes) and b"labels" (list of N ints in 0..9), and batches.meta with b"label_names".
The archive is read in place, never extracted: nothing is written and no member path is trusted.
"""

from __future__ import annotations

import pickle
import tarfile
from pathlib import Path
from typing import Any

import torch

from provisioning.core.errors import InputError
from training.node.data.images import ImageDataset
from training.node.data.npickle import UnsupportedPickle, load_array_pickle

ARCHIVE = "cifar-10-python.tar.gz"
BATCH_DIR = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
META_FILE = "batches.meta"
# Per-channel statistics of the CIFAR-10 training set, the values the literature normalises with.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def load_cifar10(source: str | Path, *, train: bool = True, augment: bool = True) -> ImageDataset:
    """The training (50,000) or test (10,000) images from an archive, a batch directory or its parent.

    Augmentation applies to the training set only. Missing or damaged files raise InputError.
    """
    names = (*TRAIN_FILES, META_FILE) if train else (TEST_FILE, META_FILE)
    files = _read_files(Path(source).expanduser(), names)
    meta = _parse(files[META_FILE], META_FILE)
    class_names = [_text(name) for name in meta.get("label_names", [])]
    images, labels = [], []
    for name in names[:-1]:
        x, y = _batch(files[name], name)
        images.append(x)
        labels.append(y)
    return ImageDataset(
        torch.cat(images),
        torch.cat(labels),
        MEAN,
        STD,
        augment=augment and train,
        synthetic=False,
        class_names=class_names,
    )


def _read_files(source: Path, names: tuple[str, ...]) -> dict[str, bytes]:
    """The raw bytes of ``names`` from whichever layout ``source`` is."""
    if source.is_dir():
        if (source / BATCH_DIR).is_dir():
            source = source / BATCH_DIR
        elif not any((source / name).exists() for name in names) and (source / ARCHIVE).is_file():
            source = source / ARCHIVE
    if source.is_file():
        return _from_archive(source, names)
    if not source.is_dir():
        raise InputError(f"{source}: no such file or directory (expected CIFAR-10's python version)")
    missing = [name for name in names if not (source / name).is_file()]
    if missing:
        raise InputError(f"{source}: CIFAR-10 files missing: {', '.join(missing)}")
    return {name: (source / name).read_bytes() for name in names}


def _from_archive(archive: Path, names: tuple[str, ...]) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                base = member.name.rsplit("/", 1)[-1]
                if member.isfile() and base in names and base not in found:
                    stream = tar.extractfile(member)
                    if stream is not None:
                        found[base] = stream.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise InputError(f"{archive}: not a readable CIFAR-10 archive ({exc})") from None
    missing = [name for name in names if name not in found]
    if missing:
        raise InputError(f"{archive}: CIFAR-10 files missing from the archive: {', '.join(missing)}")
    return found


def _parse(raw: bytes, name: str) -> dict[str, Any]:
    try:
        value = load_array_pickle(raw)
    except (pickle.UnpicklingError, UnsupportedPickle, EOFError, ValueError, TypeError, IndexError) as exc:
        raise InputError(f"{name}: not a CIFAR-10 pickle ({exc or type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise InputError(f"{name}: not a CIFAR-10 pickle (expected a dict, got {type(value).__name__})")
    return {_text(key): item for key, item in value.items()}


def _batch(raw: bytes, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N, 3, 32, 32) uint8 and labels (N,) of one batch file, checked for shape and range."""
    batch = _parse(raw, name)
    data, labels = batch.get("data"), batch.get("labels")
    if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 2:
        raise InputError(f"{name}: 'data' is not a uint8 N x 3072 array")
    if data.shape[1] != 3 * 32 * 32:
        raise InputError(f"{name}: 'data' rows have {data.shape[1]} values, expected 3072")
    try:
        label_tensor = torch.as_tensor(labels, dtype=torch.int64)
    except (TypeError, ValueError, RuntimeError):
        raise InputError(f"{name}: 'labels' is not a list of integers") from None
    if label_tensor.shape != (data.shape[0],):
        raise InputError(f"{name}: {data.shape[0]} images but {label_tensor.numel()} labels")
    if ((label_tensor < 0) | (label_tensor > 9)).any():
        raise InputError(f"{name}: labels outside 0..9")
    return data.reshape(-1, 3, 32, 32), label_tensor


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
