"""L3 job: 2 trainers + 1 holder. argv: MODE DIR ENDPOINT BUCKET.

save: three checkpoints of byte states, wait until the last is complete in S3, close.
restore: restore (the test deleted the local L2 directory first) and check the bytes.
"""

import json
import sys
from pathlib import Path

from leave import leave_now
from mpi4py import MPI

import deepcheck

comm = MPI.COMM_WORLD
mode, directory, endpoint, bucket = sys.argv[1:5]
s3 = deepcheck.S3Config(bucket=bucket, prefix="run", endpoint_url=endpoint, part_size=5 << 20)
role = "holder" if comm.rank == 2 else "trainer"
ck = deepcheck.init(comm, role, directory=directory, s3=s3, keep=2, timeout=60)


def state(step: int) -> dict:
    return {"w": bytes([step]) * (6 << 20), "step": step}


if role == "holder":
    ck.serve()
elif mode == "save":
    for step in range(1, 4):
        ck.save(state(step), step)
        ck.wait(deepcheck.Level.L3)
    ck.close()
else:
    got = ck.restore()
    ok = got.state == state(got.info.step)
    ck.close()
    result = {"step": got.info.step, "levels": [lv.name for lv in got.info.levels], "ok": ok}
    (Path(directory).parent / f"s3-{comm.rank}.json").write_text(json.dumps(result))
leave_now()
