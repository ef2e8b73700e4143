"""What mpirun starts on every node: `python -m training.node.rank JOB.yaml --roles ... --out ... --checkpoint-dir ...`.

All ranks form one DeepCheck world (MPI_COMM_WORLD); each rank's role comes from `--roles`, one per MPI
rank, as the launcher derived it from the plan's architecture (Tiering: the on-demand CPU nodes hold
checkpoints; Single Anchor: the anchor trains and holds). Trainers then form the torch.distributed
group among themselves (holders never train): torch rank = trainer index, world size = number of
trainers, rendezvous at trainer 0's node. RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT are
exported for code that reads them. A trainer imports the packages of the job's Python environment
(`--job-env`, training.node.jobenv: what the job's `setup:` installed with $DEEPVM_PIP) and exports its python
as DEEPVM_PYTHON, cold or a fork of the node's warm server alike.

Trainers then run deepvm's worker, or the job's own script (`run:`): in-process when it calls ctx.step()
(training.node.userscript), where one Checkpointer (training.node.checkpointing) applies the job's checkpoint
policy, as for the worker, agreeing among trainers over their own MPI group (training.node.trainercomm); as a
child process with torchrun's environment when it does not (run.calls_step: false, training.node.launched),
its own checkpoint files kept through DeepCheck.

A trainer on a node with instance metadata runs the Spot watcher: a notice prints a NoticeSeen event and
goes to the Checkpointer, which flushes at the next step on every trainer; after an interruption notice
the run then ends cleanly, after a rebalance recommendation alone it trains on. Holders ignore SIGUSR1
and SIGTERM (which mpirun forwards to every rank when the controller asks the job to stop): they must stay
to receive the trainers' last flush, and leave when every trainer has closed.

SIGUSR2 makes a rank print every thread's Python stack on stderr and go on (faulthandler): before the
controller kills an attempt it found hung, it asks every rank for them through mpirun, so the job's log says
where each rank waited (STACKS_SIGNAL; training.control.launcher's Attempt.dump_stacks).

Any error ends the whole job at once (MPI_Abort), so no rank waits forever in a collective for a peer
that is gone; the controller then restarts from the newest complete checkpoint. A rank of deepvm's worker
that ended cleanly leaves without the interpreter's teardown (leave_now), which with torch loaded costs
more than a second of CPU per rank on the way from a clean stop to the relaunch.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from mpi4py import MPI

import deepcheck
from provisioning.core.errors import DeepvmError, InputError
from training.node import jobenv
from training.node.whole_lines import whole_lines_into
from training.shared.events import Holder, Notice, NoticeSeen, WatcherOff, emit
from training.shared.jobspec import JobSpec, load_job_spec

if TYPE_CHECKING:
    from training.node.distenv import DistEnv
    from training.node.launched import LaunchFacts
    from training.node.worker import WorkerOptions

ROLES = ("trainer", "holder", "both")
KEPT_DIR = "kept"  # beside the job's out/ on a node: a launched script's DEEPVM_CHECKPOINT_DIR
STACKS_SIGNAL = signal.SIGUSR2  # Open MPI forwards it to every rank, as it does SIGUSR1 (the clean stop)


@dataclass(frozen=True)
class RankOptions:
    job: Path
    out: Path  # trainer 0 writes model.pt, state.pt, metrics.json here (a `run:` script: its own files too)
    checkpoint_dir: Path  # holders' L2 directory
    roles: tuple[str, ...]  # by MPI rank
    planned_trainers: int  # trainers the plan has: the policy keeps the global batch of that many
    master_addr: str
    master_port: int
    rank_batches: tuple[int, ...] | None = None  # per trainer, for mixed plans
    device: str = "auto"
    watch: bool = True
    run_id: str = ""  # the job's id (TORCHELASTIC_RUN_ID of a launched script); "": the job spec's name
    restart_count: int = 0  # launches of this job before this one
    max_restarts: int = 0  # relaunches the controller would try after failures
    job_env: Path | None = None  # the job's Python environment (training.node.jobenv), whose packages trainers import


def parse_args(argv: Sequence[str] | None = None) -> RankOptions:
    p = argparse.ArgumentParser(prog="python -m training.node.rank", description=__doc__.splitlines()[0])
    p.add_argument("job", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--checkpoint-dir", type=Path, required=True)
    p.add_argument("--roles", required=True, help="comma-separated role of each MPI rank")
    p.add_argument("--planned-trainers", type=int, required=True)
    p.add_argument("--master-addr", required=True)
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--rank-batches", help="comma-separated batch size per trainer")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--no-watch", dest="watch", action="store_false", help="do not poll instance metadata")
    p.add_argument("--run-id", default="", help="the job's id, the same at every launch")
    p.add_argument("--restart-count", type=int, default=0, help="launches of this job before this one")
    p.add_argument("--max-restarts", type=int, default=0, help="relaunches tried after failures")
    p.add_argument("--job-env", type=Path, help="the job's Python environment, whose packages trainers import")
    a = p.parse_args(argv)
    roles = tuple(a.roles.split(","))
    if any(r not in ROLES for r in roles):
        raise InputError(f"--roles {a.roles!r}: each must be one of {', '.join(ROLES)}")
    return RankOptions(
        a.job,
        a.out,
        a.checkpoint_dir,
        roles,
        a.planned_trainers,
        a.master_addr,
        a.master_port,
        tuple(int(b) for b in a.rank_batches.split(",")) if a.rank_batches else None,
        a.device,
        a.watch,
        a.run_id,
        a.restart_count,
        a.max_restarts,
        a.job_env,
    )


def _trainer_env(trainer_index: int, trainers: int, opts: RankOptions) -> DistEnv:
    from training.node.distenv import DistEnv

    env = DistEnv(
        rank=trainer_index,
        world_size=trainers,
        local_rank=int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")),
        local_size=int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1")),
        master_addr=opts.master_addr,
        master_port=opts.master_port,
    )
    os.environ.update(
        RANK=str(env.rank),
        WORLD_SIZE=str(env.world_size),
        LOCAL_RANK=str(env.local_rank),
        MASTER_ADDR=env.master_addr,
        MASTER_PORT=str(env.master_port),
    )
    return env


def _threads() -> int | None:
    """torch intra-op threads: the job's OMP_NUM_THREADS when it sets one (the worker's default otherwise)."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def run_rank(spec: JobSpec, opts: RankOptions) -> None:
    comm = MPI.COMM_WORLD
    if len(opts.roles) != comm.Get_size():
        raise InputError(f"--roles names {len(opts.roles)} ranks but the job has {comm.Get_size()}")
    role = opts.roles[comm.Get_rank()]
    if role == "holder":
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    holds = role in ("holder", "both")
    plan = spec.checkpoint_plan
    ck = deepcheck.init(
        comm,
        role,
        directory=opts.checkpoint_dir if holds else None,
        keep=2,
        keep_ram=plan.ram_slots,
        s3=plan.s3_config(),  # the area `train` granted the holders (training.shared.storage)
        levels=plan.levels,
    )
    if not ck.world.is_trainer:
        emit(Holder(rank=comm.Get_rank(), pid=os.getpid(), directory=str(opts.checkpoint_dir)))
        ck.serve(timeout=None)
        return
    train(spec, opts, ck, comm)


def train(spec: JobSpec, opts: RankOptions, ck: deepcheck.DeepCheck, comm: MPI.Comm) -> None:
    """A trainer's part. Only trainers import torch (here, not at the module's top): a holder's rank needs
    MPI and DeepCheck alone, and on a small CPU holder node torch's import (seconds, and hundreds of MB)
    would be on every relaunch's path, since the new world waits for its slowest rank."""
    from training.node.checkpointing import Checkpointer, DeepCheckHook
    from training.node.launched import LaunchedScript
    from training.node.trainercomm import TrainerComm
    from training.node.userscript import run_script
    from training.node.watcher import Watcher
    from training.node.worker import run_training

    if opts.job_env is not None:  # before the job's code: what its setup installed there is importable
        jobenv.use(opts.job_env)
    env = _trainer_env(ck.world.trainer_index, len(ck.world.trainers), opts)
    trainers = TrainerComm(comm, ck.world.trainers)
    checkpointer = Checkpointer(ck, spec.checkpoint_plan, trainers)
    launched = LaunchedScript(spec, _launch_facts(spec, opts), env, ck, trainers) if _launches(spec) else None
    noticed = checkpointer.noticed if launched is None else launched.noticed
    watcher = None
    if opts.watch:

        def on_notice(notice: Notice) -> None:
            noticed(notice)
            emit(NoticeSeen(rank=env.rank, notice=notice))

        watcher = Watcher(on_notice, lambda why: emit(WatcherOff(rank=env.rank, reason=why)))
        watcher.start()
    try:
        if launched is not None:
            launched.run()
        elif spec.run is not None:
            run_script(spec, opts.job, env, opts.device, opts.planned_trainers, opts.out, checkpointer, trainers)
        else:
            run_training(spec, env, _worker_options(env, opts), [DeepCheckHook(checkpointer)])
    finally:
        if watcher is not None:
            watcher.stop()
    ck.close()
    checkpointer.tell_safety()  # the last checkpoint settled at every level within close()
    trainers.free()


def _launches(spec: JobSpec) -> bool:
    """Whether the trainers start the job's script as a child process (training.node.launched): a script that
    does not call ctx.step() is one written for torchrun or a framework, not for deepvm."""
    return spec.run is not None and not spec.run.calls_step


def _launch_facts(spec: JobSpec, opts: RankOptions) -> LaunchFacts:
    from training.node.launched import LaunchFacts

    return LaunchFacts(
        job_file=opts.job,
        out=opts.out,
        kept_dir=opts.out.parent / KEPT_DIR,
        run_id=opts.run_id or spec.name,
        restart_count=opts.restart_count,
        max_restarts=opts.max_restarts,
        planned_world_size=opts.planned_trainers,
    )


def _worker_options(env: DistEnv, opts: RankOptions) -> WorkerOptions:
    from training.node.worker import WorkerOptions

    return WorkerOptions(
        job=opts.job,
        out=opts.out,
        master_addr=env.master_addr,
        master_port=env.master_port,
        rank_batches=opts.rank_batches,
        planned_world_size=opts.planned_trainers,
        device=opts.device,
        threads=_threads(),
        save_when_stopped=False,  # the relaunch restores DeepCheck's flushed checkpoint, not state.pt
    )


def show_stacks_on_signal() -> None:
    """STACKS_SIGNAL prints every thread's Python stack on stderr, and the rank goes on. faulthandler writes them
    from the signal handler itself, so a rank stuck in C (a collective waiting for a peer) answers too; it writes
    a line in several pieces, which mpirun's --tag-output would tag as several lines, interleaved with the other
    ranks', so it writes into a pipe, and a thread passes each line on whole. The pipe does not block: a rank
    whose stuck thread holds the GIL loses what does not fit (64 KiB, dozens of threads' stacks), never hangs in
    the handler."""
    write_end, _ = whole_lines_into(sys.stderr.fileno(), "stacks")
    os.set_blocking(write_end, False)
    faulthandler.register(STACKS_SIGNAL, file=write_end, all_threads=True)


def main(argv: Sequence[str] | None = None) -> int:
    show_stacks_on_signal()  # first: a rank may hang at its start
    try:
        opts = parse_args(argv)
        spec = load_job_spec(opts.job)
    except DeepvmError as exc:
        print(f"deepvm rank: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    try:
        run_rank(spec, opts)
    except BaseException as exc:  # whatever it is, no peer may wait for this rank
        if isinstance(exc, DeepvmError):
            print(f"deepvm rank: {exc}", file=sys.stderr, flush=True)
        else:
            traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(getattr(exc, "exit_code", 1))
    holder = opts.roles[MPI.COMM_WORLD.Get_rank()] == "holder"
    if spec.run is None or _launches(spec) or holder:  # a ctx.step() script may leave files for the exit to flush
        leave_now()
    return 0


def leave_now() -> NoReturn:
    """Finalize MPI and exit 0 without the interpreter's teardown. Python's exit with torch loaded takes
    1.5-2 s of CPU (measured on the sandbox's 2 cores: 1.7 s against 0.15 s for this), paid by every rank
    before mpirun can end an attempt that stopped for a relaunch. Nothing of deepvm's is left to flush:
    DeepCheck is closed, the worker's files are written and renamed, every event line was flushed."""
    logging.shutdown()  # DeepCheck logs through logging: its handlers flush
    sys.stdout.flush()
    sys.stderr.flush()
    MPI.Finalize()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
