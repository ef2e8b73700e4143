"""A user's own unchanged script (run.calls_step: false) on a trainer rank: started as torchrun starts its
workers, its own checkpoint files kept, and stopped by a signal at a Spot notice. Or the user's own launch
line (run.command, `torchrun ... train.py`): started by bash on the first trainer rank of each training node,
with the node's place (DEEPVM_NUM_NODES, DEEPVM_NODE_RANK, DEEPVM_GPUS_PER_NODE, MASTER_ADDR, MASTER_PORT), as
SkyPilot runs a task's `run:` once per node; the stop signal goes to its process (bash runs a single command
as that command's process: torchrun then passes the signal on to its workers).

Why a child process and not the rank itself: the rank is an MPI rank (DeepCheck's trainer side shares the MPI
world with the holders), and a script written for torchrun must see torchrun's environment and none of MPI's
(training.node.elastic_env), or Lightning takes it for an MPI job and mpi4py in it joins deepvm's world. So the
trainer rank becomes what torch's elastic agent is to its workers: it restores, starts, watches and stops
the script, and it keeps the script's files (training.node.keptfiles) through DeepCheck.

The rank's loop, once a tick on every trainer, agrees in one collective (TrainerComm.any_each) on: a notice on
any trainer's node, a clean stop asked of any rank (SIGUSR1/SIGTERM from the controller through mpirun), a script
that failed, a script still running, kept files that changed. Then, in that order:

- a failed script (a non-zero exit no one asked for) ends the job: every rank kills its script and raises, as
  any rank error does (MPI_Abort; the controller relaunches from the newest kept files);
- a notice or a stop: every rank reads its complete changed files, sends its script `run.stop_signal`, gives
  it `run.stop_grace` seconds (by default what the notice leaves after the flush), then SIGKILL; a script that
  exited by itself may have saved more, which is read too; the files are then flushed (safe on the holders
  before the rank leaves) and the run ends "stopped", whatever the script's exit status was;
- kept files that changed: kept (DeepCheck's asynchronous save), at most every `checkpoint.every_seconds`;
- no script running on any trainer: the run is complete.

Before the script starts, every trainer takes the newest complete kept files from the holders
(DeepCheck's restore) and writes them at their places, whichever trainer wrote them: what a shared
filesystem gives torchrun's users. The script runs in a session of its own (so the signals mpirun forwards
to the rank do not reach it: the rank decides), dies with the rank that started it (setpriv --pdeathsig), and
prints through the rank's stdout and stderr, which mpirun tags with the rank, a line a write
(training.node.whole_lines): an unbuffered script writes a line in pieces, and a rank's event line must not
land between them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import deepcheck
from provisioning.core.errors import DeepvmError
from training.node.distenv import DistEnv
from training.node.elastic_env import ScriptPlace, node_environment, worker_environment
from training.node.keptfiles import FileCopy, KeptFiles, Stamp, nobody_writing, open_for_writing
from training.node.kepttable import KeptTable
from training.node.safety import SafetyWatch
from training.node.trainercomm import TrainerComm
from training.node.warm import WARM_DIR_VARIABLE
from training.node.whole_lines import whole_lines_into
from training.node.worker import StopRequest
from training.shared.events import End, EndStatus, Kept, KeptHow, Notice, Start, emit
from training.shared.jobspec import JobSpec
from training.shared.metrics import RunMetrics

# between two looks at the script and its files: a file closed waits for the next look (benchmarks/
# kept_files_bench.py's close -> found), and a look costs a stat of the kept paths and one allreduce
TICK_S = 0.25
STOP_GRACE_S = 30.0  # a clean stop's grace, and a notice's when its time cannot be read
FLUSH_RESERVE_S = 30.0  # of a notice's two minutes, what the last flush keeps for itself
MIN_GRACE_S = 5.0
_DEVICE = "the script's"  # Start's device: the script chooses its own


class ScriptExited(DeepvmError):
    """The launched script exited with a failure status that no stop asked for."""


@dataclass(frozen=True)
class LaunchFacts:
    """What the rank knows of this launch beyond its place in MPI (training.node.rank's options)."""

    job_file: Path
    out: Path  # rank 0's outputs, fetched when the job completes (DEEPVM_OUT)
    kept_dir: Path  # DEEPVM_CHECKPOINT_DIR: always kept
    run_id: str
    restart_count: int
    max_restarts: int
    planned_world_size: int


class LaunchedScript:
    """One trainer rank's side of a launched script; see the module docstring."""

    def __init__(
        self, spec: JobSpec, facts: LaunchFacts, env: DistEnv, ck: deepcheck.DeepCheck, trainers: TrainerComm
    ) -> None:
        assert spec.run is not None
        self.spec, self.how, self.facts, self.env, self.ck, self.trainers = spec, spec.run, facts, env, ck, trainers
        self.files = KeptFiles(facts.job_file.parent, spec.checkpoint_plan.files, facts.kept_dir)
        self.table = KeptTable(trainers.rank)  # the kept files every trainer agreed on
        self.version = 0  # DeepCheck's step of the newest kept files
        self.notice: Notice | None = None
        self.last_keep = time.monotonic()
        self.safety = SafetyWatch(ck, spec.checkpoint_plan, claims=False) if trainers.rank == 0 else None

    def noticed(self, notice: Notice) -> None:
        """A Spot notice on this node (the watcher's thread): an interruption stops the script; a rebalance
        recommendation changes nothing, the files are kept as they are written."""
        if notice.is_interruption:
            self.notice = notice
            self.ck.request_flush()

    def run(self) -> None:
        """Restore, start, watch and stop the script (collective over trainers); End and metrics.json from
        trainer 0."""
        started = time.perf_counter()
        self.facts.kept_dir.mkdir(parents=True, exist_ok=True)
        self._restore()
        place = self._place()
        status = self._watch(place)
        if self.env.rank == 0:
            emit(End(rank=0, status=status, steps=0, final_loss=float("nan")))
            RunMetrics(
                job=self.spec.name,
                status=status,
                script=self.how.label,
                synthetic=False,
                world_size=self.env.world_size,
                first_step=0,
                steps=0,
                total_steps=0,
                final_loss=float("nan"),
                loss_curve=(),
                wall_s=round(time.perf_counter() - started, 3),
            ).write(self.facts.out)

    # --- before the launch ------------------------------------------------------------------------------
    def _restore(self) -> None:
        t0 = time.perf_counter()
        restored = self.ck.restore()
        if restored is None:
            return
        self.version = restored.info.step
        self.files.put_back(self.table.restored(restored.state, self.trainers.size))
        self._report(KeptHow.RESTORED, time.perf_counter() - t0, restored.info.levels[0].name)

    def _place(self) -> ScriptPlace:
        """torchrun's place of this rank: nodes are the groups, found from which trainers are first on theirs."""
        firsts = self.trainers.each(int(self.env.local_rank == 0))
        groups = [sum(firsts[: i + 1]) - 1 for i in range(len(firsts))]  # each trainer's node, in trainer order
        group_rank = groups[self.env.rank]
        return ScriptPlace(
            rank=self.env.rank,
            world_size=self.env.world_size,
            local_rank=groups[: self.env.rank].count(group_rank),
            local_world_size=groups.count(group_rank),
            group_rank=group_rank,
            group_world_size=sum(firsts),
            master_addr=self.env.master_addr,
            master_port=self.env.master_port,
            run_id=self.facts.run_id,
            restart_count=self.facts.restart_count,
            max_restarts=self.facts.max_restarts,
        )

    # --- the script running -----------------------------------------------------------------------------
    def _watch(self, place: ScriptPlace) -> EndStatus:
        extra = {
            "DEEPVM_CHECKPOINT_DIR": str(self.facts.kept_dir),
            "DEEPVM_OUT": str(self.facts.out),
            "DEEPVM_NUM_NODES": str(place.group_world_size),
            "DEEPVM_NODE_RANK": str(place.group_rank),
            "DEEPVM_STOP_SIGNAL": self.how.stop_signal,
            "DEEPVM_LOG_EVERY": str(self.spec.log_every),
            "DEEPVM_KEPT_FILES": json.dumps(list(self.spec.checkpoint_plan.files)),
            "PYTHONUNBUFFERED": "1",
        }
        argv = self._argv(place)
        env = (
            worker_environment(os.environ, place, extra)
            if self.how.command is None
            else node_environment(
                os.environ,
                place,
                {**extra, "PATH": os.pathsep.join([*_python_dirs(), os.environ.get("PATH", os.defpath)])},
            )
        )
        signal.signal(signal.SIGIO, signal.SIG_IGN)  # a kept file's read lease breaking (training.node.keptfiles)
        with (
            StopRequest() as stop,
            Idle() if argv is None else ScriptProcess(argv, env, self.facts.job_file.parent) as child,
        ):
            emit(
                Start(
                    rank=self.env.rank,
                    job=self.spec.name,
                    script=self.how.label,
                    synthetic=False,
                    world_size=self.env.world_size,
                    planned_world_size=self.facts.planned_world_size,
                    total_steps=0,
                    first_step=0,
                    device=_DEVICE,
                    pid=child.pid,
                )
            )
            while True:
                code = child.wait(TICK_S)
                for news in self.safety.news() if self.safety is not None else ():
                    emit(news)
                changes = self.files.changed(lambda: open_for_writing(child.pid)) if code is None else []
                due = bool(changes) and self._due()
                stopping, failed, running, keep = self.trainers.any_each(
                    self.ck.flush_requested or stop.asked, code not in (None, 0), code is None, due
                )
                if failed:
                    child.kill()
                    raise ScriptExited(
                        f"{self.how.label} exited with {code}"
                        if code not in (None, 0)
                        else f"another trainer's {self.how.label} failed"
                    )
                if stopping:
                    self._stop(child, changes)
                    return EndStatus.STOPPED
                if keep:
                    self._keep(changes if due else [])
                if not running:
                    return EndStatus.COMPLETED

    def _argv(self, place: ScriptPlace) -> list[str] | None:
        """What this rank starts: the script under the job's Python, or the command under bash on the first
        trainer of each node (None on the others: torchrun in the command starts that node's processes)."""
        if self.how.command is not None:
            return ["bash", "-c", self.how.command] if place.local_rank == 0 else None
        assert self.how.script is not None
        script = (self.facts.job_file.parent / self.how.script).resolve()
        warm = os.environ.get(WARM_DIR_VARIABLE)
        if warm:  # a fork of the node's warm server, as this rank is (or cold, as warm.start decides)
            return [
                sys.executable,
                "-m",
                "training.node.warm",
                warm,
                "training.node.script_main",
                str(script),
                *self.how.args,
            ]
        return [os.environ.get("DEEPVM_PYTHON") or sys.executable, str(script), *self.how.args]

    def _due(self) -> bool:
        every = self.spec.checkpoint_plan.every_seconds
        return every is None or time.monotonic() - self.last_keep >= every

    def _stop(self, child: ScriptProcess | Idle, before: list[FileCopy]) -> None:
        """Tell the script to stop, give it its grace, flush what it left complete (see the module docstring)."""
        grace = (
            self.how.stop_grace
            if self.how.stop_grace is not None
            else self._notice_grace(self.trainers.each(int(self.notice.takes_node_at() or 0) if self.notice else 0))
        )
        code = child.stop(getattr(signal, self.how.stop_signal), grace)
        after = self.files.changed(nobody_writing) if code >= 0 else []
        newest = {c.key: c for c in before} | {c.key: c for c in after}  # a clean exit's saves are its own
        if code >= 0:  # and so are its removals (HF's save_total_limit drops an old checkpoint as it saves)
            there = self.files.present()
            newest = {key: copy for key, copy in newest.items() if key in there}
        t0 = time.perf_counter()
        self._agree(list(newest.values()))
        if self.table:
            tree, owners = self.table.state()
            report = self.ck.flush_now(tree, self.version, owners=owners)
            self._report(KeptHow.FLUSHED, time.perf_counter() - t0, report.level.name)

    @staticmethod
    def _notice_grace(deadlines: list[int]) -> float:
        """What the earliest notice any trainer saw leaves every script (the one that saves may be on another node):
        until it takes its node, less the flush's reserve; a clean stop's grace without one."""
        known = [d for d in deadlines if d > 0]
        if not known:
            return STOP_GRACE_S
        return max(MIN_GRACE_S, min(known) - time.time() - FLUSH_RESERVE_S)

    def _keep(self, changes: list[FileCopy]) -> None:
        t0 = time.perf_counter()
        self._agree(changes)
        tree, owners = self.table.state()
        self.ck.save(tree, self.version, owners=owners)
        self.last_keep = time.monotonic()
        self._report(KeptHow.KEPT, time.perf_counter() - t0, None)

    def _agree(self, changes: list[FileCopy]) -> None:
        """Collective: every trainer's changed and removed files into one table, the same on every trainer; each
        file's newest version wins (the lowest trainer on a tie), and the trainer that has it holds it
        (training.node.kepttable: its bytes go from there to the holders, and nowhere else)."""
        gone = self.files.gone()
        offers = self.trainers.comm.allgather(([(c.key, c.stamp) for c in changes], gone))
        winners: dict[str, tuple[Stamp, int]] = {}  # key -> (the newest version's stamp, the trainer that has it)
        for trainer, (offered, _) in enumerate(offers):
            for key, stamp in offered:
                if key not in winners or stamp.mtime_ns > winners[key][0].mtime_ns:
                    winners[key] = (stamp, trainer)
        mine = {c.key: c for c in changes}
        for key, (stamp, owner) in winners.items():
            self.table.take(mine[key] if owner == self.trainers.rank else FileCopy(key, stamp, None), owner)
        removed = {key for _, keys in offers for key in keys} - set(winners)
        for key in removed:
            self.table.drop(key)
            self.files.path(key).unlink(missing_ok=True)  # as on a shared filesystem: gone for every trainer
        self.files.took(self.table.values(), removed)
        self.version += 1

    def _report(self, how: KeptHow, seconds: float, level: str | None) -> None:
        if self.env.rank != 0:
            return
        newest = max(self.table.values(), key=lambda c: c.stamp.mtime_ns, default=None)
        emit(
            Kept(
                rank=0,
                how=how,
                version=self.version,
                files=len(self.table),
                bytes=sum(c.stamp.size for c in self.table.values()),
                newest="" if newest is None else newest.key,
                written_at=0.0 if newest is None else newest.stamp.mtime_ns / 1e9,
                level=level,
                seconds=round(seconds, 3),
            )
        )


def _python_dirs() -> list[str]:
    """Where a command finds `python` and `torchrun`: the job's environment (setup's $DEEPVM_PIP installs there; its
    own torchrun: training.node.jobenv), then deepvm's own, before the node's system Python."""
    pythons = [os.environ.get("DEEPVM_PYTHON") or sys.executable, sys.executable]
    return list(dict.fromkeys(str(Path(p).parent) for p in pythons))


class Idle:
    """Where nothing runs (a command's node runs it on its first trainer only): done at once, stops at once."""

    @property
    def pid(self) -> int:
        return os.getpid()

    def __enter__(self) -> Idle:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def wait(self, timeout: float) -> int:
        time.sleep(timeout)  # the ticks' pace, as a running script's wait gives it
        return 0

    def stop(self, _sig: int, _grace: float) -> int:
        return 0

    def kill(self) -> None:
        return None


class ScriptProcess:
    """The script as a child process in a session of its own; see the module docstring."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], cwd: Path) -> None:
        death = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
        out, self._out = whole_lines_into(sys.stdout.fileno(), "script-stdout")
        err, self._err = whole_lines_into(sys.stderr.fileno(), "script-stderr")
        try:
            self.proc = subprocess.Popen(
                [*death, *argv],
                env=env,
                cwd=cwd,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        finally:
            os.close(out)
            os.close(err)
        self.pid = self.proc.pid

    def __enter__(self) -> ScriptProcess:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.kill()

    def wait(self, timeout: float) -> int | None:
        """Its exit status once it exited within `timeout` (negative: the signal that ended it), else None."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, sig: int, grace: float) -> int:
        """`sig` to the script, SIGKILL to its whole session after `grace` seconds; its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.wait(grace)
        if code is None:
            self.kill()
            code = self.proc.wait()
        return code

    def kill(self) -> None:
        """SIGKILL to every process of its session (its data loaders too), reap it, and pass on its last lines."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait()
        for pump in (self._out, self._err):
            pump.join(timeout=5)  # a grandchild that left the session may hold the pipe: never wait for it
