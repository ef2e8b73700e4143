"""DeepCheck's L0 snapshot of CUDA tensors (snapshot.copy_range): a non-blocking copy into pinned host memory,
ordered before the next kernels on the stream by a CUDA event. Runs only where CUDA is (a GPU machine); CI
has none and skips it.

What must hold: save() returns before the copy is done, yet the checkpoint holds the bytes of the moment of
save() even when the caller overwrites the tensors on the GPU right after it, as an optimizer step does."""

from __future__ import annotations

import pytest
import torch
from mpi4py import MPI

import deepcheck
from deepcheck import Level

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture
def anchor(tmp_path):
    ck = deepcheck.init(MPI.COMM_SELF, "both", directory=tmp_path / "ck", keep=2, timeout=120)
    yield ck
    ck.close()


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def test_state_overwritten_on_the_gpu_right_after_save_is_saved_as_it_was(anchor):
    gen = torch.Generator(device="cuda").manual_seed(0)
    weights = torch.randn(64 * 2**20, device="cuda", generator=gen)  # 256 MiB: a copy takes tens of ms
    moments = torch.randn(4096, 4096, device="cuda", generator=gen, dtype=torch.bfloat16)
    cpu_side = torch.arange(1000, dtype=torch.int64)
    for step in (1, 2):
        expected = {"w": _bytes(weights), "m": _bytes(moments.t()), "c": _bytes(cpu_side)}
        handle = anchor.save({"w": weights, "m": moments.t(), "c": cpu_side, "step": step}, step)
        for _ in range(8):  # the "optimizer step": kernels on the same stream, queued behind the copy
            weights.mul_(1.5).add_(1.0)
            moments.add_(1.0)
        assert handle.share_bytes == handle.nbytes > 280 * 2**20
    assert anchor.wait(Level.L2).step == 2
    restored = anchor.restore(rng=False)
    assert restored is not None and restored.info.step == 2
    state = restored.state
    assert state["w"].device.type == "cpu" and state["m"].dtype == torch.bfloat16
    for key in ("w", "m", "c"):
        assert torch.equal(_bytes(state[key]), expected[key]), key


def test_save_returns_before_a_synchronous_copy_would(anchor):
    """The stall is the copy's launch, not the copy: compared with a blocking .cpu() of the same state."""
    weights = torch.randn(256 * 2**20, device="cuda")  # 1 GiB
    torch.cuda.synchronize()
    anchor.save({"w": weights}, 1)  # first save allocates the pinned buffer: not what is measured
    anchor.wait(Level.L1)
    stalls = []
    for step in (2, 3, 4):
        stalls.append(anchor.save({"w": weights}, step).stall_s)
        anchor.wait(Level.L1)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    weights.cpu()
    end.record()
    end.synchronize()
    blocking_s = start.elapsed_time(end) / 1000
    assert min(stalls) < blocking_s / 2, (stalls, blocking_s)
