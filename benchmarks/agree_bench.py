"""CPU of the trainers' per-step agreement: Open MPI's blocking allreduce (what TrainerComm and DeepCheck's
should_flush() called before) against deepcheck.transport.allreduce (a non-blocking one, polled with a short
backoff), in the same run.

Ranks arrive at each agreement as trainers do at the end of a step: each after a step of its own length (STEP_MS,
rank r a little slower than rank 0), so the early ones wait. Between hosts Open MPI talks TCP (`--mca btl
self,tcp` here, as between the sandbox's hosts); a blocking wait spins a core the whole time, a polled one
sleeps. It prints, per side, the ranks' CPU-s over the run (each rank's process time, the step's own busy loop
subtracted), the wall time per agreement, and the CPU ratio. Run: `python benchmarks/agree_bench.py [--ranks 3]
[--agreements 300] [--step-ms 10]` (it starts mpirun itself; Open MPI as root needs OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, set here).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def rank_side(blocking: bool, agreements: int, step_ms: float) -> dict[str, float]:
    """One side on this rank: `agreements` steps, each a sleep of the rank's step length then one agreement."""
    from array import array

    from mpi4py import MPI

    from deepcheck.transport import allreduce

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    step_s = step_ms / 1000 * (1 + 0.3 * rank)  # trainers' steps differ a little: the fastest waits longest
    comm.Barrier()
    cpu, wall = time.process_time(), time.perf_counter()
    agreed = 0
    for step in range(agreements):
        time.sleep(step_s)  # the step's compute, off the CPU: what remains is the agreement's own cost
        flag = step % 7 == rank
        if blocking:
            agreed += bool(comm.allreduce(flag, op=MPI.LOR))
        else:
            agreed += bool(allreduce(comm, array("q", [flag]), MPI.BOR)[0])
    result = {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall, "agreed": agreed}
    comm.Barrier()
    return result


def rank_main(agreements: int, step_ms: float) -> None:
    from mpi4py import MPI

    sides = {name: rank_side(name == "blocking", agreements, step_ms) for name in ("blocking", "polled")}
    gathered = MPI.COMM_WORLD.gather(sides, root=0)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(json.dumps(gathered))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--agreements", type=int, default=300)
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)  # mpirun's ranks run this
    args = parser.parse_args()
    if args.rank:
        rank_main(args.agreements, args.step_ms)
        return
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "PYTHONPATH": str(REPO)}
    command = [
        "mpirun",
        "-np",
        str(args.ranks),
        "--oversubscribe",
        "--bind-to",
        "none",
        "--mca",
        "btl",
        "self,tcp",
        "-x",
        "PYTHONPATH",
        sys.executable,
        __file__,
        "--rank",
        "--agreements",
        str(args.agreements),
        "--step-ms",
        str(args.step_ms),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"mpirun failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    ranks = json.loads(done.stdout.strip().splitlines()[-1])
    totals = {}
    for side in ("blocking", "polled"):
        cpu = sum(r[side]["cpu_s"] for r in ranks)
        per = max(r[side]["wall_s"] for r in ranks) / args.agreements
        assert len({r[side]["agreed"] for r in ranks}) == 1, "the ranks disagreed"
        totals[side] = cpu
        print(
            f"{side:8s}: ranks' CPU {cpu:6.2f} s over {args.agreements} agreements "
            f"({[round(r[side]['cpu_s'], 2) for r in ranks]}), {per * 1000:.2f} ms a step"
        )
    print(f"RESULT: polled / blocking CPU x{totals['polled'] / max(totals['blocking'], 1e-9):.2f}")


if __name__ == "__main__":
    main()
