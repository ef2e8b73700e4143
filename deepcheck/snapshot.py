"""L0: copy this trainer's byte range of the state into a reused host buffer.

This is the only part of a checkpoint that blocks the training loop, so it does as little as possible:
no serialization, no checksum, only the trainer's own share (1/n of the state), into a buffer that is
allocated once and reused (fresh pages cost a page fault each). CPU tensors are copied synchronously, so
when `save()` returns the snapshot cannot be torn by the next optimizer step. CUDA tensors are copied
with non_blocking=True into pinned memory and a CUDA event is recorded on the current stream; later
kernels on that stream (the optimizer step) are ordered after the copy, and the background thread waits
on the event before it reads the buffer.
"""

from __future__ import annotations

import ctypes
import random
import threading
from typing import Any

from . import lazytorch
from .codec import Flattened
from .errors import CheckpointTimeout


class HostBuffer:
    """`nbytes` of host memory exposed both as a memoryview (for MPI and zlib) and as a uint8 tensor."""

    def __init__(self, nbytes: int, pinned: bool):
        self.nbytes = nbytes
        self.pinned = pinned
        if pinned:
            import torch

            self._tensor = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            self.view = memoryview((ctypes.c_ubyte * nbytes).from_address(self._tensor.data_ptr())).cast("B")
        else:
            self._raw = bytearray(nbytes)
            self._tensor = None
            self.view = memoryview(self._raw)

    def tensor(self) -> Any:
        if self._tensor is None:
            import torch

            self._tensor = torch.frombuffer(self._raw, dtype=torch.uint8)
        return self._tensor


class BufferPool:
    """At most `count` L0 buffers. save() waits for a free one; that wait is part of its reported stall."""

    def __init__(self, count: int):
        self.count = count
        self.free: list[HostBuffer] = []
        self.lent = 0
        self.cond = threading.Condition()

    def acquire(self, nbytes: int, pinned: bool, timeout: float | None) -> HostBuffer:
        with self.cond:
            ok = self.cond.wait_for(lambda: self.free or self.lent + len(self.free) < self.count, timeout)
            if not ok:
                raise CheckpointTimeout(f"no free L0 buffer after {timeout}s: earlier checkpoints are still in flight")
            match = [b for b in self.free if b.nbytes == nbytes and b.pinned == pinned]
            if match:
                self.free.remove(match[0])
                buf = match[0]
            else:
                if self.free and self.lent + len(self.free) >= self.count:
                    self.free.pop(0)  # wrong size or kind: let it go and allocate afresh
                buf = HostBuffer(nbytes, pinned)
            self.lent += 1
            return buf

    def release(self, buf: HostBuffer) -> None:
        with self.cond:
            self.lent -= 1
            self.free.append(buf)
            self.cond.notify_all()


def host_view(t: Any, nbytes: int) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy; valid while `t` is alive."""
    return memoryview((ctypes.c_ubyte * nbytes).from_address(t.data_ptr())).cast("B")


def needs_pinned(flat: Flattened) -> bool:
    torch = lazytorch.loaded()
    return bool(
        torch is not None
        and torch.cuda.is_available()
        and any(leaf.kind == "tensor" and src.is_cuda for leaf, src in zip(flat.leaves, flat.sources, strict=True))
    )


def copy_range(flat: Flattened, lo: int, hi: int, buf: HostBuffer) -> Any:
    """Copy stream bytes [lo, hi) into `buf`, zeroing padding between leaves. Returns a CUDA event or None."""
    cuda_copy = False
    cursor = lo
    for leaf, src in zip(flat.leaves, flat.sources, strict=True):
        start, end = leaf.offset, leaf.offset + leaf.nbytes
        if end <= lo or start >= hi:
            continue
        a, b = max(lo, start), min(hi, end)
        if src is None:  # codec.Elsewhere: save() checked that none lies in this trainer's range
            raise AssertionError(f"stream bytes [{a}, {b}) are held by another trainer")
        if a > cursor:
            buf.view[cursor - lo : a - lo] = bytes(a - cursor)
        if leaf.kind == "tensor" and src.is_cuda:
            u8 = src.reshape(-1).view(lazytorch.loaded().uint8)[a - start : b - start]
            buf.tensor()[a - lo : b - lo].copy_(u8, non_blocking=buf.pinned)
            cuda_copy |= buf.pinned
        elif leaf.kind == "tensor":  # a plain memcpy: 2-3x faster than Tensor.copy_ for bytes on the CPU
            buf.view[a - lo : b - lo] = host_view(src, leaf.nbytes)[a - start : b - start]
        else:
            buf.view[a - lo : b - lo] = src[a - start : b - start]
        cursor = b
    if cursor < hi:
        buf.view[cursor - lo : hi - lo] = bytes(hi - cursor)
    if not cuda_copy:
        return None
    event = lazytorch.loaded().cuda.Event()
    event.record()
    return event


def capture_rng() -> dict[str, Any]:
    """This rank's random number generator states (Python, and torch CPU/CUDA when torch is in use)."""
    out: dict[str, Any] = {"python": random.getstate()}
    torch = lazytorch.loaded()
    if torch is not None:
        out["torch"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def restore_rng(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    torch = lazytorch.loaded()
    if torch is not None and "torch" in states:
        torch.set_rng_state(states["torch"])
    if torch is not None and "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
