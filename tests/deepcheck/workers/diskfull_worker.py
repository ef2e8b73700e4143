"""A holder whose disk takes no more than 64 KiB per file (RLIMIT_FSIZE: writes past it fail with EFBIG, as a full
disk's fail with ENOSPC). argv: DIR OUT

2 trainers + 1 holder, levels L1 and L2. The trainers save a 1 MB state at steps 1 and 2 and wait until the lead
has said what became of step 2 at L2. Writes OUT/diskfull-RANK.json: the newest checkpoint complete at L1 and at
L2, and the newest the lead said failed at L2, with its reason.
"""

import json
import resource
import signal
import sys
import time
from pathlib import Path

from leave import leave_now
from mpi4py import MPI

import deepcheck

comm = MPI.COMM_WORLD
directory, out = sys.argv[1], Path(sys.argv[2])
role = "holder" if comm.rank == 2 else "trainer"
if role == "holder":
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not the signal that would kill the holder
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, resource.RLIM_INFINITY))
levels = [deepcheck.Level.L1, deepcheck.Level.L2]
ck = deepcheck.init(comm, role, directory=directory, levels=levels, chunk_bytes=1 << 16, timeout=60)

if role == "holder":
    ck.serve()
else:
    for step in (1, 2):
        ck.save({"w": bytes([step]) * 1_000_000}, step)
    ck.wait(deepcheck.Level.L1, step=2)
    deadline = time.monotonic() + 30

    def said(level_step) -> bool:
        return level_step is not None and level_step.step == 2

    while not (said(getattr(ck.failed(deepcheck.Level.L2), "ckpt", None)) or said(ck.completed(deepcheck.Level.L2))):
        assert time.monotonic() < deadline, "the lead said nothing of step 2 at L2"
        time.sleep(0.05)
    failure = ck.failed(deepcheck.Level.L2)
    l1, l2 = ck.completed(deepcheck.Level.L1), ck.completed(deepcheck.Level.L2)
    result = {
        "l1": None if l1 is None else l1.step,
        "l2": None if l2 is None else l2.step,
        "failed": None if failure is None else [failure.ckpt.step, failure.level.name, failure.reason],
    }
    ck.close(timeout=5)
    (out / f"diskfull-{comm.rank}.json").write_text(json.dumps(result))
leave_now()
