"""The whole pipeline in one process: a Single Anchor world of one rank (role "both") on COMM_SELF."""

from __future__ import annotations

import pytest
import torch
from mpi4py import MPI

import deepcheck
from deepcheck import ConfigError, DeepCheckError, Level, StateError


@pytest.fixture
def anchor(tmp_path):
    ck = deepcheck.init(MPI.COMM_SELF, "both", directory=tmp_path / "ck", keep=2, timeout=30)
    yield ck
    ck.close()


def test_save_mutate_restore_bitwise(anchor, tmp_path):
    w = torch.randn(1000, dtype=torch.float64)
    for step in (1, 2, 3):
        handle = anchor.save({"w": w, "step": step}, step, epoch=0, rank_state={"cursor": step})
        expected = w.clone()
        w.add_(1.0)  # mutate right after save(): the checkpoint must hold the old values
        assert handle.nbytes == 8000 and handle.share_bytes == 8000 and handle.stall_s >= 0
    assert anchor.wait(Level.L2).step == 3
    assert anchor.latest().step == 3
    restored = anchor.restore()
    assert restored.info.step == 3 and restored.rank_state == {"cursor": 3} and restored.fallbacks == []
    assert torch.equal(restored.state["w"].view(torch.uint8), expected.view(torch.uint8))
    assert Level.L1 in restored.info.levels and Level.L2 in restored.info.levels
    on_disk = sorted(p.name[:17] for p in (tmp_path / "ck").iterdir())  # keep=2; step 2 may be superseded
    assert len(on_disk) == 2 and on_disk[-1] == "ckpt-000000000003"


def test_flush_now_reports_time_and_level(anchor):
    anchor.request_flush()
    assert anchor.should_flush()
    report = anchor.flush_now({"x": b"abc"}, 7)
    assert report.step == 7 and report.level >= Level.L1 and report.seconds >= report.stall_s >= 0
    assert not anchor.should_flush()


def test_bad_calls_say_what_is_wrong(anchor):
    anchor.save({"x": 1}, 5)
    with pytest.raises(ConfigError, match="not after the previous save"):
        anchor.save({"x": 1}, 5)
    with pytest.raises(ConfigError, match="non-negative integer"):
        anchor.save({"x": 1}, -1)
    with pytest.raises(StateError, match=r"state\['f'\]"):
        anchor.save({"f": print}, 9)
    with pytest.raises(ConfigError, match="serve\\(\\) is for holder-only"):
        anchor.serve()


def test_restore_with_nothing_saved_returns_none(anchor):
    assert anchor.latest() is None and anchor.restore() is None


def test_use_after_close(tmp_path):
    ck = deepcheck.init(MPI.COMM_SELF, "both", directory=tmp_path, timeout=30)
    ck.save({"w": b"x" * 1000}, 1)
    ck.close()
    with pytest.raises(DeepCheckError, match="after close"):
        ck.save({}, 1)
    # what became of the checkpoints is still told: the last one settled at every level within close()
    assert ck.completed(deepcheck.Level.L2).step == 1 and ck.failed(deepcheck.Level.L2) is None


@pytest.mark.parametrize(
    ("role", "kwargs", "message"),
    [
        ("pilot", {}, "role must be one of"),
        ("trainer", {}, "at least one trainer and one holder"),
        ("holder", {}, "needs directory="),
        ("both", {"directory": "x", "keep": 0}, "keep must be an integer >= 1"),
        ("both", {"directory": "x", "chunk_bytes": 3 << 30}, "chunk_bytes must be between"),
    ],
)
def test_init_rejects_bad_setups(role, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        deepcheck.init(MPI.COMM_SELF, role, **kwargs)
