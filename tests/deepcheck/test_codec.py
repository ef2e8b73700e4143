from __future__ import annotations

import itertools
import math
from collections import OrderedDict

import pytest
import torch

from deepcheck import StateError
from deepcheck.codec import ALIGN, flatten, unflatten
from deepcheck.snapshot import HostBuffer, copy_range


def _training_state():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        sched.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "rng": torch.get_rng_state(),
        "data": {"epoch": 3, "batch": 17, "order": (3, 1, 2)},
        "extras": {
            1: -0.0,
            "nan": math.nan,
            "c": 1 + 2j,
            "raw": b"\x00\xff" * 5,
            "ba": bytearray(b"xy"),
            "s": {1, 2},
            "dt": torch.bfloat16,
            "od": OrderedDict(b=1, a=2),
            "none": None,
            "big": 2**80,
        },
        "odd": torch.arange(12, dtype=torch.float64).reshape(3, 4).t(),  # non-contiguous
        "types": [torch.ones(2, dtype=d) for d in (torch.bool, torch.int8, torch.float16, torch.complex64)],
        "empty": torch.empty(0, 5),
        "scalar": torch.tensor(3.5),
    }


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return (
            type(b) is torch.Tensor
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
        )
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, float):
        return type(b) is float and math.copysign(1, a) == math.copysign(1, b) and a == b
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _stream(flat) -> bytearray:
    buf = HostBuffer(flat.total, pinned=False)
    copy_range(flat, 0, flat.total, buf)
    return bytearray(buf.view)


def test_roundtrip_is_bitwise_exact():
    state = _training_state()
    flat = flatten(state)
    assert all(leaf.offset % ALIGN == 0 for leaf in flat.leaves)
    back = unflatten(flat.skeleton, flat.leaves, _stream(flat))
    assert _same(state, back)


def test_pieces_copied_separately_equal_the_whole():
    flat = flatten(_training_state())
    whole = _stream(flat)
    cuts = [0, 1, 77, 500, flat.total // 2, flat.total - 3, flat.total]
    pieces = bytearray()
    for lo, hi in itertools.pairwise(cuts):
        buf = HostBuffer(hi - lo, pinned=False)
        copy_range(flat, lo, hi, buf)
        pieces += buf.view
    assert pieces == whole


def test_snapshot_is_not_torn_by_later_updates():
    w = torch.ones(1000)
    flat = flatten({"w": w})
    buf = HostBuffer(flat.total, pinned=False)
    copy_range(flat, 0, flat.total, buf)
    w.add_(1)  # the next optimizer step
    back = unflatten(flat.skeleton, flat.leaves, bytearray(buf.view))
    assert torch.equal(back["w"], torch.ones(1000))


def test_inline_mode_keeps_everything_in_json():
    flat = flatten({"rng": torch.get_rng_state(), "b": b"abc"}, inline=True)
    assert flat.leaves == [] and flat.total == 0
    back = unflatten(flat.skeleton, [])
    assert torch.equal(back["rng"], torch.get_rng_state()) and back["b"] == b"abc"


def test_layout_fingerprint_tracks_shapes():
    a = flatten({"w": torch.zeros(3)}).layout_crc()
    assert a == flatten({"w": torch.ones(3)}).layout_crc()
    assert a != flatten({"w": torch.zeros(4)}).layout_crc()


@pytest.mark.parametrize(
    ("state", "where"),
    [
        ({"model": {"f": lambda x: x}}, "state['model']['f']"),
        ([1, object()], "state[1]"),
        ({"s": torch.zeros(3).to_sparse()}, "state['s']"),
    ],
)
def test_unsupported_values_are_named(state, where):
    with pytest.raises(StateError) as err:
        flatten(state)
    assert str(err.value).startswith(where)
