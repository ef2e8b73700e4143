"""DeepCheck's L0 snapshot of a CUDA-resident state against the blocking ways to take one, in the same run.

    python benchmarks/deepcheck_gpu_bench.py --sizes 1024,4096 [--json]

Needs a CUDA device (a GPU machine; CI has none). One process, a Single Anchor world of one rank ("both") on
COMM_SELF, the state a float32 dict of 8 tensors on the GPU. Each figure is the median of --reps runs after a
warm-up. Per size:
  torch_save   torch.save of the state to a file + fsync: what a training loop blocks on without DeepCheck
  cpu_copy     state -> pageable host tensors (`.cpu()`): the least blocking copy without pinned memory
  stall        how long deepcheck's save() blocked the caller (launching the pinned, non-blocking copies)
  step_after   save() + the next "optimizer step" (one add_ per tensor, queued behind the copies on the same
               stream) until the GPU is done, minus that step alone: the time the copy really costs the loop
  l1_s, l2_s   save() called -> L1 (host RAM, the copy done and checksummed) and -> L2 (on disk)
The ratios printed are torch_save / step_after and cpu_copy / step_after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from mpi4py import MPI

import deepcheck
from deepcheck import Level

MiB = 1 << 20


def make_state(nbytes: int) -> dict[str, torch.Tensor]:
    parts = 8
    gen = torch.Generator(device="cuda").manual_seed(0)
    return {f"layer{i}": torch.randn(nbytes // 4 // parts, device="cuda", generator=gen) for i in range(parts)}


def timed(reps: int, once: Callable[[], float]) -> float:
    once()  # warm-up: allocations, pinned buffers, the file's first blocks
    return statistics.median(once() for _ in range(reps))


def torch_save(state: dict[str, torch.Tensor], path: Path) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    elapsed = time.perf_counter() - t0
    path.unlink()
    return elapsed


def cpu_copy(state: dict[str, torch.Tensor]) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    copies = [t.cpu() for t in state.values()]
    elapsed = time.perf_counter() - t0
    del copies
    return elapsed


def step(state: dict[str, torch.Tensor]) -> None:
    for t in state.values():
        t.add_(1e-3)


def step_alone(state: dict[str, torch.Tensor]) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step(state)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


class DeepCheckRun:
    """save() then the next step on one anchor; each call a new step number."""

    def __init__(self, ck: deepcheck.DeepCheck, state: dict[str, torch.Tensor]):
        self.ck, self.state, self.step_no = ck, state, 0
        self.stalls: list[float] = []
        self.l1: list[float] = []
        self.l2: list[float] = []

    def save_then_step(self) -> float:
        torch.cuda.synchronize()
        self.step_no += 1
        t0 = time.perf_counter()
        handle = self.ck.save(self.state, self.step_no)
        step(self.state)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        self.ck.wait(Level.L1)
        self.l1.append(time.perf_counter() - t0)
        self.ck.wait(Level.L2)
        self.l2.append(time.perf_counter() - t0)
        self.stalls.append(handle.stall_s)
        return elapsed


def bench(size_mib: int, reps: int, directory: Path) -> dict[str, float]:
    state = make_state(size_mib * MiB)
    alone = timed(reps, lambda: step_alone(state))
    row = {
        "size_mib": size_mib,
        "torch_save": timed(reps, lambda: torch_save(state, directory / "sync.pt")),
        "cpu_copy": timed(reps, lambda: cpu_copy(state)),
        "step_alone": alone,
    }
    ck = deepcheck.init(MPI.COMM_SELF, "both", directory=directory / f"ck{size_mib}", keep=1, timeout=600)
    try:
        run = DeepCheckRun(ck, state)
        row["step_after"] = timed(reps, run.save_then_step) - alone
        row["stall"] = statistics.median(run.stalls[1:])
        row["l1_s"] = statistics.median(run.l1[1:])
        row["l2_s"] = statistics.median(run.l2[1:])
    finally:
        ck.close()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,4096", help="state sizes in MiB, comma-separated")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None, help="directory for checkpoint files (default: a temp dir)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("deepcheck_gpu_bench: needs a CUDA device")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rows = [bench(int(s), args.reps, Path(tmp)) for s in args.sizes.split(",")]
    if args.json:
        print(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}))
        return
    print(f"{torch.cuda.get_device_name()}; medians of {args.reps} runs, seconds")
    print(
        f"{'MiB':>6} {'torch.save':>10} {'.cpu()':>8} {'stall':>8} {'step_after':>10} {'L1':>7} {'L2':>7} "
        f"{'save/dc':>8} {'cpu/dc':>7}"
    )
    for r in rows:
        print(
            f"{r['size_mib']:>6} {r['torch_save']:>10.3f} {r['cpu_copy']:>8.3f} {r['stall']:>8.4f} "
            f"{r['step_after']:>10.4f} {r['l1_s']:>7.3f} {r['l2_s']:>7.3f} "
            f"{r['torch_save'] / r['step_after']:>7.1f}x {r['cpu_copy'] / r['step_after']:>6.1f}x"
        )


if __name__ == "__main__":
    main()
