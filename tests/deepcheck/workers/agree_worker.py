"""Trainers that call save() with different states. argv: DIR OUT. Roles: trainer, trainer, holder.

Each round every trainer records the error its save() raised, or the step that then reached L2; a hang
here (trainers waiting for shards that never come) is what the test guards against.
"""

import json
import sys
from pathlib import Path

import torch
from leave import leave_now
from mpi4py import MPI

import deepcheck

comm = MPI.COMM_WORLD
directory, out = sys.argv[1], Path(sys.argv[2])
role = "holder" if comm.rank == 2 else "trainer"
ck = deepcheck.init(comm, role, directory=directory if role == "holder" else None, timeout=30)
if role == "holder":
    ck.serve()
    sys.exit()

base = {"w": torch.arange(1000, dtype=torch.float32), "data": {"batch": 0}}
rounds = {
    "extra_tensor": (1, {**base, "extra": torch.ones(10)} if comm.rank == 1 else base),
    "other_shape": (2, {**base, "w": torch.zeros(999)} if comm.rank == 0 else base),
    "other_step": (3 + comm.rank, base),
    "unsupported_value": (5, {**base, "f": print} if comm.rank == 1 else base),
    "same": (6, base),
}
result = {}
for name, (step, state) in rounds.items():
    try:
        ck.save(state, step)
    except deepcheck.DeepCheckError as exc:
        result[name] = [type(exc).__name__, str(exc)]
        continue
    result[name] = ["ok", ck.wait(deepcheck.Level.L2).step]
ck.close()
(out / f"agree-{comm.rank}.json").write_text(json.dumps(result))
leave_now()
