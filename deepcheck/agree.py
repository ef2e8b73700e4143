"""save() is collective: before anything is sent, the trainers check that they save the same thing.

Every trainer cuts its share out of the flat stream using the stream's total size, and holders expect one
shard per trainer of each step. Trainers that disagree on the step, the size or the layout of the state
would therefore ship overlapping or missing byte ranges, or shards of checkpoints nobody else sends, and
the checkpoint could never complete. So each save() exchanges (step, stream size, layout fingerprint)
over the trainers' communicator with a non-blocking allgather, started before the L0 copy and finished
after it (the exchange hides behind the copy), and every trainer raises the same StateError when they
differ. A trainer whose own save() fails before the copy (a bad step, an unsupported value) still takes
part, so that the others raise instead of waiting for it.
"""

from __future__ import annotations

from array import array

from mpi4py import MPI

from .errors import StateError
from .transport import BUSY_CAP, wait_requests

FAILED = -1  # stream size sent by a trainer whose save() already failed


class Agreement:
    """One save()'s exchange; `check()` waits for it and raises StateError unless all trainers agree."""

    @classmethod
    def failed(cls, tcomm: MPI.Comm) -> Agreement:
        return cls(tcomm, FAILED, FAILED, 0)

    def __init__(self, tcomm: MPI.Comm, step: int, total: int, layout_crc: int):
        self.mine = array("q", [step, total, layout_crc])
        self.all = array("q", bytes(self.mine.itemsize * len(self.mine) * tcomm.Get_size()))
        self.req = tcomm.Iallgather([self.mine, MPI.INT64_T], [self.all, MPI.INT64_T])

    def check(self, timeout: float | None) -> None:
        wait_requests([self.req], timeout, "the other trainers to call save()", cap=BUSY_CAP)
        rows = [tuple(self.all[i : i + 3]) for i in range(0, len(self.all), 3)]
        if len(set(rows)) == 1:
            return
        seen = "; ".join(f"trainer {t}: {_describe(*row)}" for t, row in enumerate(rows))
        raise StateError(
            f"trainers called save() with different states ({seen}). save() is collective: every trainer "
            "passes the same step and a state of the same layout (same keys, shapes and dtypes: the "
            "replicated model/optimizer/scheduler state); per-rank data goes in rank_state"
        )


def _describe(step: int, total: int, layout_crc: int) -> str:
    return "its save() failed" if total == FAILED else f"step {step}, {total} bytes, layout {layout_crc:08x}"
