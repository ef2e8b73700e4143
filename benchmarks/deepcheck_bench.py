"""DeepCheck benchmark: training stall, L1/L2 completion throughput and memory, against baselines
measured in the same run.

    mpirun -n 4 --oversubscribe --bind-to none --mca btl self,vader \
        python benchmarks/deepcheck_bench.py --sizes 100,500,1024 [--json]

The last rank is the holder, the others are trainers holding the same float32 state of each size.
Every figure is the median of --reps runs (after warm-up), baselines included. Per size:
  sync      trainer 0 does torch.save of the whole state + fsync (the blocking alternative)
  loopback  all trainers at once MPI-send their 1/n of the bytes to the holder, in the same 8 MiB
            messages as DeepCheck (trainers: blocking Send; holder: Irecv all, Waitall; plain buffers,
            no checksum)
  disk      the holder writes the bytes as n files, each written, fsynced, renamed and its directory
            fsynced (no DeepCheck)
  copy      every trainer at once memcpys its 1/n of the bytes into a warm buffer: the least an L0
            snapshot can cost on this machine (copy_s for trainer 0, copy_max_s for the slowest)
  deepcheck save() stall of trainer 0 (stall_s) and of the slowest trainer (stall_max_s: a data-parallel
            step waits for it), then time until L1 and L2 are announced. The L1 transfer stage
            (save() returned -> L1) is compared with loopback, the L2 stage (L1 -> L2) with disk; l1_s is
            the end-to-end time from the save() call.
Peak host memory (ru_maxrss) is reported per rank at the end.

What the comparison charges to DeepCheck and not to the baselines: the trainers' checksum of every byte
(checksum.py; it shares the two cores with the holder's receive copy), and the "next optimizer step"
(an add_ on 1/8 of the state, right after save(), while the other trainers may still be copying). With
3 trainers on 2 cores the L0 copies run side by side: each trainer's stall is its 1/3 of the state
copied at the memory bandwidth left to it. The trainers pass a barrier before each save(), as they do
after a data-parallel step's allreduce and as the loopback's senders start together: otherwise rank 0's
stall and L1 stage would include the other trainers' lag in noticing the previous checkpoint's L2.
Measured numbers, with the machine's load: deepcheck/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

from mpi4py import MPI

import deepcheck
from deepcheck.sharding import even_split
from deepcheck.snapshot import host_view
from deepcheck.storage_disk import atomic_write_all
from deepcheck.transport import DEFAULT_CHUNK, spans

MiB = 1 << 20


def make_state(nbytes: int):
    import torch

    parts = 8
    numel = nbytes // 4 // parts
    torch.manual_seed(0)
    return {"model": {f"layer{i}.weight": torch.randn(numel) for i in range(parts)}, "step": 0}


def bench_sync(state, directory: Path, reps: int) -> float:
    import torch

    path = directory / "sync.pt"
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        times.append(time.perf_counter() - t0)
        path.unlink()
    return statistics.median(times)


def bench_copy(tcomm: MPI.Comm, state, buf: bytearray, reps: int) -> tuple[float, float]:
    """The least an L0 snapshot can cost: every trainer at once memcpys its 1/n of the state's bytes into a
    warm buffer. Returns (trainer 0's time, the slowest trainer's time)."""
    tensors = list(state["model"].values())
    size = tensors[0].numel() * 4
    lo, hi = even_split(size * len(tensors), tcomm.Get_size())[tcomm.rank]
    out = memoryview(buf)
    mine, slowest = [], []
    for _ in range(1 + reps):  # the first run faults the buffer in
        tcomm.Barrier()
        t0 = time.perf_counter()
        for i, t in enumerate(tensors):
            a, b = max(lo, i * size), min(hi, (i + 1) * size)
            if a < b:
                out[a - lo : b - lo] = host_view(t, size)[a - i * size : b - i * size]
        elapsed = time.perf_counter() - t0
        mine.append(elapsed)
        slowest.append(tcomm.allreduce(elapsed, op=MPI.MAX))
    return statistics.median(mine[1:]), statistics.median(slowest[1:])


def bench_loopback(comm: MPI.Comm, holder: int, total: int, buf: bytearray, reps: int) -> float:
    """Each trainer sends its share to the holder; returns the holder's time for all bytes."""
    n = comm.Get_size() - 1
    times = []
    for _ in range(1 + reps):  # the first run faults the holder's buffer in
        comm.Barrier()
        t0 = time.perf_counter()
        if comm.rank == holder:
            reqs = []
            for t, (lo, hi) in enumerate(even_split(total, n)):
                reqs += [
                    comm.Irecv([memoryview(buf)[lo + a : lo + b], MPI.BYTE], t, 7)
                    for a, b in spans(hi - lo, DEFAULT_CHUNK)
                ]
            MPI.Request.Waitall(reqs)
        else:
            lo, hi = even_split(total, n)[comm.rank]
            for a, b in spans(hi - lo, DEFAULT_CHUNK):
                comm.Send([memoryview(buf)[a:b], MPI.BYTE], holder, 7)
        comm.Barrier()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def bench_disk(directory: Path, buf: bytearray, n: int, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for i, (lo, hi) in enumerate(even_split(len(buf), n)):
            atomic_write_all(directory, [(f"disk-{i}.bin", memoryview(buf)[lo:hi])])  # write, fsync, rename, fsync dir
        times.append(time.perf_counter() - t0)
        for i in range(n):
            (directory / f"disk-{i}.bin").unlink()
    return statistics.median(times)


def bench_deepcheck(ck, tcomm: MPI.Comm, state, reps: int, first_step: int) -> dict:
    stalls, slowest, l1, xfer, l2 = [], [], [], [], []
    weights = next(iter(state["model"].values()))
    for i in range(2 + reps):  # two warm-up saves fill the buffer pools
        tcomm.Barrier()  # trainers enter save() together, as after a step's allreduce (and as in loopback)
        t0 = time.perf_counter()
        handle = ck.save(state, first_step + i)
        ts = time.perf_counter()
        weights.add_(1.0)  # the next optimizer step
        ck.wait(deepcheck.Level.L1)
        t1 = time.perf_counter()
        ck.wait(deepcheck.Level.L2)
        t2 = time.perf_counter()
        every_stall = tcomm.allreduce(handle.stall_s, op=MPI.MAX)
        if i >= 2:
            stalls.append(handle.stall_s)
            slowest.append(every_stall)
            l1.append(t1 - t0)
            xfer.append(t1 - ts)
            l2.append(t2 - t1)
    med = statistics.median
    return {
        "stall_s": med(stalls),
        "stall_max_s": med(slowest),
        "l1_s": med(l1),
        "l1_stage_s": med(xfer),
        "l2_stage_s": med(l2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description="DeepCheck benchmark (run under mpirun, >= 2 ranks)")
    ap.add_argument("--sizes", default="100,500,1024", help="state sizes in MiB, comma-separated")
    ap.add_argument("--reps", type=int, default=3, help="measured runs of each figure per size (after warm-up)")
    ap.add_argument("--dir", default=None, help="directory for checkpoint files (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print machine-readable results")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    comm = MPI.COMM_WORLD
    if comm.size < 2:
        sys.exit("run under mpirun with at least 2 ranks (trainers + 1 holder)")
    role = "holder" if comm.rank == comm.size - 1 else "trainer"
    tcomm = comm.Split(0 if role == "trainer" else MPI.UNDEFINED)
    scratch = None if args.dir else comm.bcast(tempfile.mkdtemp(prefix="deepcheck-bench-") if comm.rank == 0 else None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup below when mpirun stops the job
    base = Path(args.dir or scratch)

    def clean() -> None:  # checkpoints of a GiB add up fast in /tmp
        if scratch and comm.rank == 0:
            shutil.rmtree(scratch, ignore_errors=True)

    try:
        report = run(comm, role, tcomm, base, sizes, args.reps)
    except BaseException:  # a failed rank (or SIGTERM) would leave the others waiting forever: end the job
        traceback.print_exc()
        sys.stderr.flush()
        clean()
        comm.Abort(1)
    clean()
    if comm.rank == 0:
        show(report, args.json, args.reps)


def run(comm: MPI.Comm, role: str, tcomm: MPI.Comm, base: Path, sizes: list[int], reps: int) -> dict:
    holder = comm.size - 1
    n = comm.size - 1
    results = []
    step = 0
    for size in sizes:
        total = size * MiB
        state = make_state(total) if role == "trainer" else None
        nbytes = comm.bcast(sum(t.numel() * 4 for t in state["model"].values()) if comm.rank == 0 else None, root=0)
        directory = base / f"{size}MiB"
        directory.mkdir(parents=True, exist_ok=True)
        buf = bytearray(nbytes if role == "holder" else (nbytes + n - 1) // n + 1)
        row = {"size_mib": size, "bytes": nbytes, "trainers": n, "holders": 1}
        if comm.rank == 0:
            row["sync_save_s"] = bench_sync(state, directory, reps)
        if role == "trainer":
            floor = bench_copy(tcomm, state, buf, reps)
            if comm.rank == 0:
                row["copy_s"], row["copy_max_s"] = floor
        row["loopback_s"] = comm.bcast(bench_loopback(comm, holder, nbytes, buf, reps), root=holder)
        row["disk_s"] = comm.bcast(bench_disk(directory, buf, n, reps) if role == "holder" else None, root=holder)
        del buf
        ck = deepcheck.init(comm, role, directory=directory / "ck", keep=1, keep_ram=1)
        if role == "holder":
            ck.serve()
        else:
            row.update(bench_deepcheck(ck, tcomm, state, reps, step))
            ck.close()
        step += 10 + reps
        row = comm.bcast(row, root=0)
        row["stall_pct_of_sync"] = 100 * row["stall_s"] / row["sync_save_s"]
        row["stall_max_pct_of_sync"] = 100 * row["stall_max_s"] / row["sync_save_s"]
        row["copy_pct_of_sync"] = 100 * row["copy_s"] / row["sync_save_s"]
        row["copy_max_pct_of_sync"] = 100 * row["copy_max_s"] / row["sync_save_s"]
        row["l1_pct_of_loopback"] = 100 * row["loopback_s"] / row["l1_stage_s"]
        row["l2_pct_of_disk"] = 100 * row["disk_s"] / row["l2_stage_s"]
        results.append(row)
        del state
    peak = comm.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, root=0)
    return {"results": results, "peak_rss_mib_per_rank": peak, "roles": ["trainer"] * n + ["holder"]}


def show(report: dict, as_json: bool, reps: int) -> None:
    if as_json:
        print(json.dumps(report, indent=2))
        return
    print(f"{len(report['roles']) - 1} trainers + 1 holder; medians of {reps} runs; times in seconds")
    cols = [
        "size_mib",
        "sync_save_s",
        "stall_s",
        "stall_pct_of_sync",
        "stall_max_pct_of_sync",
        "copy_pct_of_sync",
        "copy_max_pct_of_sync",
        "loopback_s",
        "l1_stage_s",
        "l1_pct_of_loopback",
        "l1_s",
        "disk_s",
        "l2_stage_s",
        "l2_pct_of_disk",
    ]
    print(" ".join(f"{c:>18}" for c in cols))
    for r in report["results"]:
        print(" ".join(f"{r[c]:>18.4g}" for c in cols))
    print("peak RSS MiB per rank:", ", ".join(f"{p:.0f}" for p in report["peak_rss_mib_per_rank"]))


if __name__ == "__main__":
    main()
