"""save() is collective: before anything is copied or sent, the trainers check that they save the same thing.

Every trainer cuts its share out of the flat stream using the stream's total size, and holders expect one
shard per trainer of each step. Trainers that disagree on the step, the size or the layout of the state
would therefore ship overlapping or missing byte ranges, or shards of checkpoints nobody else sends, and
the checkpoint could never complete. So each save() first exchanges (step, stream size, layout
fingerprint) over the trainers' communicator, and every trainer raises the same StateError when they
differ. A trainer whose own save() fails before that (a bad step, an unsupported value) still takes part,
so that the others raise instead of waiting for it.

The exchange comes before the L0 copy, not behind it: a non-blocking collective only advances while each
trainer calls into MPI, and a trainer busy copying (holding the GIL) would hold up the others' save() by
however much longer its copy takes. Trainers enter save() together (after a step's allreduce), so the
exchange costs tens of microseconds.
"""

from __future__ import annotations

import contextlib
from array import array

from mpi4py import MPI

from .errors import StateError
from .transport import BUSY_CAP, wait_requests

FAILED = -1  # stream size sent by a trainer whose save() already failed


def check_agreement(tcomm: MPI.Comm, step: int, total: int, layout_crc: int, timeout: float | None) -> None:
    """Collective over trainers: raise StateError on every trainer unless all passed the same values."""
    mine = array("q", [step, total, layout_crc])
    every = array("q", bytes(mine.itemsize * len(mine) * tcomm.Get_size()))
    req = tcomm.Iallgather([mine, MPI.INT64_T], [every, MPI.INT64_T])
    wait_requests([req], timeout, "the other trainers to call save()", cap=BUSY_CAP)
    rows = [tuple(every[i : i + 3]) for i in range(0, len(every), 3)]
    if len(set(rows)) == 1:
        return
    seen = "; ".join(f"trainer {t}: {_describe(*row)}" for t, row in enumerate(rows))
    raise StateError(
        f"trainers called save() with different states ({seen}). save() is collective: every trainer "
        "passes the same step and a state of the same layout (same keys, shapes and dtypes: the "
        "replicated model/optimizer/scheduler state); per-rank data goes in rank_state"
    )


def check_failed(tcomm: MPI.Comm, timeout: float | None) -> None:
    """Take part in the exchange for a trainer whose own save() already failed (it raises its own error)."""
    with contextlib.suppress(StateError):
        check_agreement(tcomm, FAILED, FAILED, 0, timeout)


def _describe(step: int, total: int, layout_crc: int) -> str:
    return "its save() failed" if total == FAILED else f"step {step}, {total} bytes, layout {layout_crc:08x}"
