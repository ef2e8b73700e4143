"""Datasets: CIFAR-10 from files written in the real format, augmentation, synthetic data, S3 source."""

from __future__ import annotations

import pickle
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from cifar_files import CLASS_NAMES, batch_pickle, write_archive, write_batch_dir

from provisioning.core.errors import InputError
from training.node.data import build_dataset, load_cifar10, make_synthetic
from training.node.data.augment import augment_batch
from training.node.data.npickle import UnsupportedPickle, load_array_pickle
from training.shared.jobspec import Cifar10Data, SyntheticData


@pytest.fixture
def cifar(tmp_path):
    batches = write_batch_dir(tmp_path / "parent")
    return tmp_path / "parent", batches


def expected(batches, names):
    images = torch.cat([batches[n][0] for n in names])
    labels = torch.tensor([y for n in names for y in batches[n][1]])
    return images, labels


TRAIN = [f"data_batch_{i}" for i in range(1, 6)]


def test_train_set_from_parent_dir(cifar):
    parent, batches = cifar
    ds = load_cifar10(parent, train=True)
    images, labels = expected(batches, TRAIN)
    assert len(ds) == 30
    assert torch.equal(ds.images, images) and torch.equal(ds.labels, labels)
    assert ds.class_names == tuple(CLASS_NAMES)
    assert ds.augment and not ds.synthetic


def test_test_set_is_not_augmented(cifar):
    parent, batches = cifar
    ds = load_cifar10(parent / "cifar-10-batches-py", train=False)
    images, labels = expected(batches, ["test_batch"])
    assert torch.equal(ds.images, images) and torch.equal(ds.labels, labels)
    assert not ds.augment


def test_archive_and_dir_holding_archive(cifar, tmp_path):
    parent, batches = cifar
    archive_dir = tmp_path / "dl"
    archive_dir.mkdir()
    archive = archive_dir / "cifar-10-python.tar.gz"
    write_archive(parent / "cifar-10-batches-py", archive)
    images, labels = expected(batches, TRAIN)
    for source in (archive, archive_dir):
        ds = load_cifar10(source)
        assert torch.equal(ds.images, images) and torch.equal(ds.labels, labels)


def test_items_are_normalised_with_cifar_statistics(cifar):
    parent, batches = cifar
    ds = load_cifar10(parent, augment=False)
    x, y = ds[7]
    raw = batches["data_batch_2"][0][1].float() / 255
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(3, 1, 1)
    assert torch.allclose(x, (raw - mean) / std)
    assert int(y) == batches["data_batch_2"][1][1]


def test_missing_batch_is_named(cifar):
    parent, _ = cifar
    (parent / "cifar-10-batches-py" / "data_batch_4").unlink()
    with pytest.raises(InputError, match=r"CIFAR-10 files missing: data_batch_4$"):
        load_cifar10(parent)


def test_missing_from_archive_is_named(cifar, tmp_path):
    parent, _ = cifar
    (parent / "cifar-10-batches-py" / "batches.meta").unlink()
    archive = tmp_path / "c.tar.gz"
    write_archive(parent / "cifar-10-batches-py", archive)
    with pytest.raises(InputError, match=r"missing from the archive: batches\.meta"):
        load_cifar10(archive)


def test_no_such_path(tmp_path):
    with pytest.raises(InputError, match="no such file or directory"):
        load_cifar10(tmp_path / "nothing")


def test_empty_dir_names_missing_files(tmp_path):
    with pytest.raises(InputError, match="CIFAR-10 files missing: data_batch_1, data_batch_2"):
        load_cifar10(tmp_path)


def test_corrupt_archive(tmp_path):
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(InputError, match="not a readable CIFAR-10 archive"):
        load_cifar10(archive)


def test_truncated_batch(cifar):
    parent, _ = cifar
    path = parent / "cifar-10-batches-py" / "data_batch_3"
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(InputError, match="data_batch_3: not a CIFAR-10 pickle"):
        load_cifar10(parent)


def test_wrong_row_width(cifar):
    parent, _ = cifar
    path = parent / "cifar-10-batches-py" / "data_batch_1"
    path.write_bytes(batch_pickle(torch.zeros(2, 100, dtype=torch.uint8), [0, 1]))
    with pytest.raises(InputError, match="data_batch_1: 'data' rows have 100 values, expected 3072"):
        load_cifar10(parent)


def test_label_count_mismatch(cifar):
    parent, _ = cifar
    path = parent / "cifar-10-batches-py" / "test_batch"
    bad = batch_pickle(torch.zeros(3, 3, 32, 32, dtype=torch.uint8), [0, 1, 2]).replace(
        b"](K\x00K\x01K\x02e", b"](K\x00K\x01e"
    )
    path.write_bytes(bad)
    with pytest.raises(InputError, match="test_batch: 3 images but 2 labels"):
        load_cifar10(parent, train=False)


def test_foreign_globals_are_refused_not_run(tmp_path):
    marker = tmp_path / "pwned"
    evil = pickle.dumps(Evil(str(marker)), protocol=2)
    with pytest.raises(UnsupportedPickle, match="refusing to load global"):
        load_array_pickle(evil)
    assert not marker.exists()


class Evil:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


HAVE_NUMPY = shutil.which("python3") is not None and (
    subprocess.run(["python3", "-c", "import numpy"], capture_output=True).returncode == 0
)


@pytest.mark.skipif(not HAVE_NUMPY, reason="no python3 with numpy to write reference pickles")
@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_pickles_written_by_real_numpy(tmp_path, protocol):
    out = tmp_path / "np.pkl"
    script = (
        "import pickle, numpy as np;"
        "a = np.arange(24, dtype=np.uint8).reshape(2, 12);"
        "f = np.arange(6, dtype='<f4').reshape(2, 3).T;"  # Fortran order
        f"pickle.dump({{'data': a, 'f': f, 'i': np.array([-5, 7], dtype=np.int64), 'labels': [1, 2]}},"
        f" open({str(out)!r}, 'wb'), protocol={protocol})"
    )
    subprocess.run(["python3", "-c", script], check=True)
    value = load_array_pickle(out.read_bytes())
    assert torch.equal(value["data"], torch.arange(24, dtype=torch.uint8).reshape(2, 12))
    assert torch.equal(value["f"], torch.arange(6, dtype=torch.float32).reshape(2, 3).T)
    assert torch.equal(value["i"], torch.tensor([-5, 7]))
    assert value["labels"] == [1, 2]


def test_augment_is_a_padded_crop_or_its_mirror():
    x = torch.rand(3, 3, 8, 8)
    out = augment_batch(x, torch.Generator().manual_seed(1), pad=2)
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for i in range(3):
        candidates = [padded[i, :, dy : dy + 8, dx : dx + 8] for dy in range(5) for dx in range(5)]
        candidates += [c.flip(2) for c in candidates]
        assert any(torch.equal(out[i], c) for c in candidates)


def test_augment_is_reproducible_and_varies():
    x = torch.rand(16, 3, 32, 32)
    a = augment_batch(x, torch.Generator().manual_seed(3))
    b = augment_batch(x, torch.Generator().manual_seed(3))
    c = augment_batch(x, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == x.shape


def test_synthetic_is_deterministic_balanced_and_labelled():
    a = make_synthetic(200, (3, 32, 32), 10, seed=1)
    b = make_synthetic(200, (3, 32, 32), 10, seed=1)
    c = make_synthetic(200, (3, 32, 32), 10, seed=2)
    assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)
    assert not torch.equal(a.images, c.images)
    assert a.synthetic and a.images.shape == (200, 3, 32, 32)
    assert torch.bincount(a.labels, minlength=10).tolist() == [20] * 10
    x, _ = a.batch(range(200))
    assert abs(float(x.mean())) < 0.05 and abs(float(x.std()) - 1) < 0.05


def test_synthetic_classes_are_separable_but_noisy():
    ds = make_synthetic(1000, (3, 32, 32), 10, seed=0)
    x, y = ds.batch(range(1000))
    train, test = slice(0, 500), slice(500, 1000)
    means = torch.stack([x[train][y[train] == k].mean(0) for k in range(10)])
    distance = torch.cdist(x[test].flatten(1), means.flatten(1))
    accuracy = float((distance.argmin(1) == y[test]).float().mean())
    assert accuracy > 0.9
    same_class = x[y == 0]
    assert float((same_class[0] - same_class[1]).abs().mean()) > 0.3  # not copies of one image


def test_build_dataset_from_spec(cifar):
    parent, _ = cifar
    syn = build_dataset(SyntheticData(kind="synthetic", samples=20, classes=4, seed=0))
    assert len(syn) == 20 and syn.synthetic
    real = build_dataset(Cifar10Data(kind="cifar10", path=str(parent), augment=False))
    assert len(real) == 30 and not real.augment


def test_cifar_from_s3_prefix_is_cached(cifar, tmp_path):
    import boto3
    from moto import mock_aws

    parent, batches = cifar
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="data")
        for path in (parent / "cifar-10-batches-py").iterdir():
            s3.upload_file(str(path), "data", f"sets/cifar/{path.name}")
        spec = Cifar10Data(kind="cifar10", s3="s3://data/sets/cifar", cache_dir=str(tmp_path / "cache"))
        ds = build_dataset(spec)
        images, _ = expected(batches, TRAIN)
        assert torch.equal(ds.images, images)
        cached = tmp_path / "cache" / "data" / "sets" / "cifar" / "data_batch_1"
        stamp = cached.stat().st_mtime_ns
        build_dataset(spec)
        assert cached.stat().st_mtime_ns == stamp  # not downloaded again
        empty = Cifar10Data(kind="cifar10", s3="s3://data/nothing", cache_dir=str(tmp_path / "cache"))
        with pytest.raises(InputError, match="no objects under this prefix"):
            build_dataset(empty)
