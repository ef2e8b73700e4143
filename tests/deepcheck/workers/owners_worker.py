"""A state whose leaves live on different trainers (DeepCheck.save's `owners`). argv: ROLES DIR OUT

ROLES is one letter per rank (T trainer, H holder). Trainer t holds the bytes of leaves `file-t-*` only (trainer 1
none: an empty range of the stream) and passes codec.Elsewhere for the others'; saves twice, then restores in the
same world; every trainer must get every byte back. A trainer that passes Elsewhere for a leaf it owns makes every
trainer's save fail with StateError. Writes OUT/owners-RANK.json.
"""

import hashlib
import json
import sys
from pathlib import Path

from mpi4py import MPI

import deepcheck
from deepcheck.codec import Elsewhere

comm = MPI.COMM_WORLD
roles, directory, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
role = {"T": "trainer", "H": "holder"}[roles[comm.rank]]
ck = deepcheck.init(comm, role, directory=directory if role == "holder" else None, chunk_bytes=1 << 16, timeout=60)
if role == "holder":
    ck.serve()
    sys.exit(0)

me, n = ck.world.trainer_index, len(ck.world.trainers)
FILES = {0: [("file-0-a", 300_001), ("file-0-b", 7)], 2: [("file-2-a", 1 << 20)]}  # trainer 1 holds nothing


def content(name: str, size: int, version: int) -> bytearray:
    seed = hashlib.sha256(f"{name}-{version}".encode()).digest()
    return bytearray((seed * (size // len(seed) + 1))[:size])


def state(version: int, lie: bool = False) -> tuple[dict, list[int]]:
    tree, owners = {}, []
    for owner in range(n):
        for name, size in FILES.get(owner, []):
            mine = owner == me and not lie
            tree[name] = {"v": version, "data": content(name, size, version) if mine else Elsewhere(size)}
            owners.append(owner)
    return tree, owners


result: dict = {"rank": comm.rank}
for version in (1, 2):
    tree, owners = state(version)
    handle = ck.save(tree, version, owners=owners)
    result.setdefault("sent", []).append(handle.share_bytes)
ck.wait(deepcheck.Level.L2, step=2)
try:
    tree, owners = state(3, lie=me == 0)
    ck.save(tree, 3, owners=owners)
    result["lie"] = "saved"
except deepcheck.StateError as exc:
    result["lie"] = f"StateError: {exc}"
restored = ck.restore()
got = restored.state
result["step"] = restored.info.step
result["exact"] = all(
    entry["v"] == 2 and entry["data"] == content(name, size, 2)
    for owner, files in FILES.items()
    for name, size in files
    for entry in [got[name]]
)
result["names"] = sorted(got)
ck.close()
(out / f"owners-{comm.rank}.json").write_text(json.dumps(result))
