"""A job that names its levels (deepcheck.init's `levels`). argv: LEVELS DIR OUT [ENDPOINT BUCKET]

LEVELS like "L2,L3"; 2 trainers + 1 holder. The trainers save steps 1 and 2, flush step 3 (flush_now), wait for
it at the highest level named, then restore in the same world. Writes OUT/levels-RANK.json: the flush's level,
the restored checkpoint's step and levels, and whether its bytes are exact.
"""

import json
import sys
from pathlib import Path

from leave import leave_now
from mpi4py import MPI

import deepcheck

comm = MPI.COMM_WORLD
levels = [deepcheck.Level[name] for name in sys.argv[1].split(",")]
directory, out = sys.argv[2], Path(sys.argv[3])
s3 = deepcheck.S3Config(bucket=sys.argv[5], prefix="run", endpoint_url=sys.argv[4]) if len(sys.argv) > 4 else None
role = "holder" if comm.rank == 2 else "trainer"
ck = deepcheck.init(comm, role, directory=directory, s3=s3, levels=levels, chunk_bytes=1 << 16, timeout=60)


def state(step: int) -> dict:
    return {"w": bytes([step]) * (300_000 + step), "step": step}


if role == "holder":
    ck.serve()
else:
    for step in (1, 2):
        ck.save(state(step), step)
    flushed = ck.flush_now(state(3), 3)
    ck.wait(max(levels), step=3)
    got = ck.restore()
    result = {
        "flush": flushed.level.name,
        "step": got.info.step,
        "levels": [lv.name for lv in got.info.levels],
        "exact": got.state == state(got.info.step),
    }
    ck.close()
    (out / f"levels-{comm.rank}.json").write_text(json.dumps(result))
leave_now()
