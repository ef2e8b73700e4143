"""Write small CIFAR-10 file sets in the real format, byte for byte the way the published files are made.

The published batches are Python 2 cPickle (protocol 2) dumps of numpy arrays. numpy is not installed
here, so the opcodes are emitted directly: a dict of py2 strings, the array as
numpy.core.multiarray._reconstruct(ndarray, (0,), 'b') plus a BUILD with (1, shape, dtype('u1'),
False, raw bytes), the labels as a list of ints.
"""

from __future__ import annotations

import io
import struct
import tarfile
from pathlib import Path

import torch

CLASS_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _str(value: bytes) -> bytes:
    """A Python 2 `str`."""
    if len(value) < 256:
        return b"U" + bytes([len(value)]) + value
    return b"T" + struct.pack("<I", len(value)) + value


def _int(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes([value])
    return b"J" + struct.pack("<i", value)


def _dtype_u1() -> bytes:
    state = b"(" + _int(3) + _str(b"|") + b"NNN" + _int(-1) + _int(-1) + _int(0) + b"t"
    return b"cnumpy\ndtype\n" + _str(b"u1") + b"\x89\x88\x87R" + state + b"b"


def _uint8_array(data: torch.Tensor) -> bytes:
    rows, cols = data.shape
    head = b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n" + _int(0) + b"\x85" + _str(b"b")
    shape = _int(rows) + _int(cols) + b"\x86"
    state = b"(" + _int(1) + shape + _dtype_u1() + b"\x89" + _str(bytes(data.flatten().tolist())) + b"t"
    return head + b"\x87R" + state + b"b"


def _list(items: list[bytes]) -> bytes:
    return b"](" + b"".join(items) + b"e"


def py2_pickle(entries: dict[bytes, bytes]) -> bytes:
    """A protocol-2 pickle of a dict whose values are already-encoded pickle fragments."""
    body = b"".join(_str(key) + value for key, value in entries.items())
    return b"\x80\x02}(" + body + b"u."


def batch_pickle(images: torch.Tensor, labels: list[int], label: bytes = b"training batch 1 of 5") -> bytes:
    return py2_pickle(
        {
            b"batch_label": _str(label),
            b"labels": _list([_int(y) for y in labels]),
            b"data": _uint8_array(images.reshape(len(labels), -1)),
            b"filenames": _list([_str(f"img_{i}.png".encode()) for i in range(len(labels))]),
        }
    )


def meta_pickle(per_batch: int) -> bytes:
    return py2_pickle(
        {
            b"num_cases_per_batch": _int(per_batch),
            b"label_names": _list([_str(n.encode()) for n in CLASS_NAMES]),
            b"num_vis": _int(3072),
        }
    )


def fake_batches(per_batch: int = 6, seed: int = 0) -> dict[str, tuple[torch.Tensor, list[int]]]:
    """Random images and labels for the five train batches and the test batch."""
    gen = torch.Generator().manual_seed(seed)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    out = {}
    for name in names:
        images = torch.randint(0, 256, (per_batch, 3, 32, 32), generator=gen, dtype=torch.uint8)
        labels = torch.randint(0, 10, (per_batch,), generator=gen).tolist()
        out[name] = (images, labels)
    return out


def write_batch_dir(root: Path, per_batch: int = 6, seed: int = 0) -> dict[str, tuple[torch.Tensor, list[int]]]:
    """root/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}; returns what was written."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batches = fake_batches(per_batch, seed)
    for name, (images, labels) in batches.items():
        (folder / name).write_bytes(batch_pickle(images, labels))
    (folder / "batches.meta").write_bytes(meta_pickle(per_batch))
    (folder / "readme.html").write_text("<html></html>")
    return batches


def write_archive(folder: Path, archive: Path) -> None:
    """Pack a batch directory as cifar-10-python.tar.gz does: members under cifar-10-batches-py/."""
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(folder.iterdir()):
            info = tarfile.TarInfo(f"cifar-10-batches-py/{path.name}")
            data = path.read_bytes()
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
