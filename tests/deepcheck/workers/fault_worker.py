"""Fault-test job: 2 trainers + 2 holders saving small byte states until killed.

Trainer 0 restores, checks every byte of what it got against the deterministic content of that step,
logs "ready <step>" and then "complete <step>" whenever a newer checkpoint is announced durable (L2).
Every rank writes its pid to PIDS/<role>-<rank> so the test can kill -9 it.
"""

import hashlib
import os
import sys
import time
from pathlib import Path

from leave import leave_now
from mpi4py import MPI

import deepcheck

SIZES = (300_007, 700_001, 64)


def content(step: int, i: int, n: int) -> bytes:
    block = hashlib.sha256(f"{step}:{i}".encode()).digest()
    return (block * (n // len(block) + 1))[:n]


def state(step: int, scale: int = 1) -> dict:
    return {
        "blobs": [content(step, i, n * scale) for i, n in enumerate(SIZES)],
        "meta": {"step": step, "pos": (step, 7)},
    }


def main() -> None:
    directory, log_path, pids, steps = (
        Path(sys.argv[1]),
        Path(sys.argv[2]),
        Path(sys.argv[3]),
        int(sys.argv[4]),
    )
    scale = int(sys.argv[5]) if len(sys.argv) > 5 else 1  # blobs this many times bigger
    comm = MPI.COMM_WORLD
    role = "trainer" if comm.rank < 2 else "holder"
    (pids / f"{role}-{comm.rank}").write_text(str(os.getpid()))
    ck = deepcheck.init(comm, role, directory=directory, keep=2, chunk_bytes=256 << 10, timeout=60)
    if role == "holder":
        ck.serve()
        return

    def note(line: str) -> None:
        if comm.rank == 0:
            with open(log_path, "a") as log:
                log.write(line + "\n")

    restored = ck.restore()
    start = 0
    if restored is not None:
        got = restored.state
        assert got == state(restored.info.step, scale), (
            f"restored step {restored.info.step} differs from what was saved"
        )
        start = restored.info.step + 1
    note(f"ready {-1 if restored is None else restored.info.step}")
    reported = None
    for step in range(start, start + steps):
        ck.save(state(step, scale), step)
        time.sleep(0.002)
        done = ck.completed(deepcheck.Level.L2)
        if done is not None and done != reported:
            reported = done
            note(f"complete {done.step}")
    ck.close()
    note(f"torch {int('torch' in sys.modules)}")  # small byte states never need it
    note(f"closed {ck.last_step}")


if __name__ == "__main__":
    main()
    leave_now()
