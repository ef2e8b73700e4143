"""Your own training script under `deepvm train`: what deepvm gives it, and the little it asks in return.

The job spec names the script instead of deepvm's model and data (see configs/own-script.yaml):

    run:
      script: own_train.py       # relative to the job file; its whole directory is pushed to every node
      args: [--lr, 0.05]         # the script's sys.argv[1:]
    steps: 200                   # what progress and cost count to

deepvm starts the script on every trainer rank (holders keep the checkpoints), in the job directory, as
`python own_train.py ARGS` would run it, after it has exported RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR
and MASTER_PORT (the trainers only: `dist.init_process_group(ctx.backend)` joins them), started
DeepCheck and the Spot watcher. The script attaches to its context and reports each step:

    from training import job

    ctx = job.attach()
    dist.init_process_group(ctx.backend)
    model = DistributedDataParallel(net.to(ctx.device))
    state = ctx.restore()                       # the newest checkpoint's tree, or None: a fresh start
    if state is not None:
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    for step in range(ctx.start_step + 1, ctx.total_steps + 1):
        loss = train_on(batch_of(step))        # one optimizer step
        ctx.log(step, loss=loss)               # to TensorBoard and `deepvm watch` (returns at once)
        if ctx.step(step, lambda: {"model": net.state_dict(), "optimizer": optimizer.state_dict()},
                    loss=loss, samples=batch_size):
            break                               # its checkpoint is safe: leave now
    if ctx.rank == 0:
        torch.save(net.state_dict(), ctx.out / "model.pt")   # fetched back when the job completes

What deepvm does for it: `ctx.step()` applies the job's `checkpoint:` policy (every N steps or T
seconds, through DeepCheck to the holders); on a Spot notice on any trainer, or a clean stop asked by the
controller (a replacement node to fold in, Ctrl-C), every trainer flushes a checkpoint of that very step
and `ctx.step()` returns True; the controller then relaunches the script on the nodes it has, where
`ctx.restore()` hands back that step. Progress (step, loss, samples/s) shows in `deepvm train` and
`deepvm status`; `ctx.log(step, **scalars)` sends trainer 0's scalars (numbers or one-element tensors)
to the job's TensorBoard files, written where its controller runs (the head), and to `deepvm watch`: it
only queues them, a thread reads and sends them, and a relaunch continues the same run. Rank 0's
`ctx.out` is fetched to `--out` when the job completes, with deepvm's metrics.json (steps, loss curve;
the name is deepvm's).

What deepvm relies on:

- Every trainer calls `restore()` once before its first step (at most once; it is collective) and
  `step()` after every optimizer step with the same step numbers: steps completed, counting from 1.
- When `step()` returns True the script returns (calling `step()` again is an error). Returning before
  `total_steps` otherwise ends the job as completed at that step; returning before the first step (no
  `ctx.step()` at all while steps were left) fails the job. A script that never calls `step()` (one
  written for torchrun, or for a framework's trainer) says `run.calls_step: false` and gives no `steps`:
  deepvm then starts it as torchrun would, in a process of its own, and keeps its own checkpoint files
  (training.node.launched); it does not attach.
- The state tree (from the callable, asked only when a checkpoint is taken) has the same layout on every
  trainer: the replicated state of DDP, made of tensors, numbers, strings and lists, tuples and dicts
  of them. Restored tensors are CPU tensors; `load_state_dict` copies them onto the device. Each rank's
  torch and Python RNG states are saved and restored on their own.
- A relaunch may have fewer (or more) trainers than the run that saved: derive each step's batch from
  the step and the rank (or keep your data position in the tree), and size it from `ctx.world_size` and
  `ctx.planned_world_size` to keep the global batch.
- An exception (or a non-zero exit) ends the whole job at once, like any rank error: the traceback shows
  in `deepvm train`, which relaunches from the newest checkpoint and gives up after repeated failures
  without progress.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from training.node.metrics_log import MetricsLog
from training.shared.events import End, EndStatus, Start, Step, emit
from training.shared.metrics import RunMetrics

if TYPE_CHECKING:  # only deepvm's runner builds a context: a script importing this module needs no MPI
    from training.node.checkpointing import Checkpointer
    from training.node.distenv import DistEnv
    from training.node.trainercomm import TrainerComm
    from training.node.worker import StopRequest
    from training.shared.jobspec import JobSpec

_attached: JobContext | None = None


class NotUnderDeepvm(RuntimeError):
    """attach() in a process that `deepvm train` did not start."""


def attach() -> JobContext:
    """This trainer's context, prepared by deepvm before it ran the script."""
    if _attached is None:
        raise NotUnderDeepvm(
            "training.job.attach(): this script is not running under `deepvm train`; name it in a job spec's "
            "`run: {script: ...}` and train with `deepvm train JOB.yaml`"
        )
    return _attached


@contextmanager
def attached(ctx: JobContext) -> Iterator[JobContext]:
    """For deepvm's runner (training.node.userscript): `attach()` returns `ctx` while the script runs."""
    global _attached
    _attached = ctx
    try:
        yield ctx
    finally:
        _attached = None


class JobContext:
    """One trainer's view of the job; see the module docstring for the contract."""

    def __init__(
        self,
        spec: JobSpec,
        env: DistEnv,
        device: torch.device,
        planned_world_size: int,
        out: Path,
        checkpointer: Checkpointer,
        trainers: TrainerComm,
        stop: StopRequest,
    ) -> None:
        assert spec.run is not None  # the spec's validation guarantees it, and steps unless calls_step is false
        self.rank, self.world_size, self.local_rank = env.rank, env.world_size, env.local_rank
        self.device = device  # this rank's GPU (set as the current one), or the CPU
        self.planned_world_size = planned_world_size  # trainers in the plan, to keep its global batch
        self.total_steps = spec.steps or 0  # 0: the spec says the script takes none (run.calls_step: false)
        self.seed = spec.seed
        self.out = out  # rank 0's files here are fetched back when the job completes
        self.start_step = 0  # steps done before this launch: the restored checkpoint's step
        self._spec, self._script, self._calls_step = spec, spec.run.label, spec.run.calls_step
        self._checkpointer, self._trainers, self._stop = checkpointer, trainers, stop
        self._started = self._leaving = False
        self._started_at = time.perf_counter()
        self._last_step = 0
        self._curve: list[tuple[int, float]] = []
        self._window_samples, self._window_start = 0, time.perf_counter()
        self._metrics = MetricsLog(env.rank)

    @property
    def backend(self) -> str:
        """The torch.distributed backend for `device`: NCCL between GPUs, gloo between CPUs."""
        return "nccl" if self.device.type == "cuda" else "gloo"

    def restore(self) -> Any | None:
        """Collective, once, before the first step: the newest complete checkpoint's tree, or None."""
        if self._started:
            raise RuntimeError("ctx.restore() is called once, before the first ctx.step()")
        restored = self._checkpointer.restore()
        self._begin(restored.info.step if restored is not None else 0)
        return None if restored is None else restored.state

    def step(
        self,
        step: int,
        state: Callable[[], Any],
        *,
        loss: float | torch.Tensor,
        samples: int = 0,
        epoch: int | None = None,
    ) -> bool:
        """Collective, after every optimizer step: checkpoint by the job's policy, report progress; True when
        the script must return now (its checkpoint of `step` is safe).

        state: returns the tree to checkpoint; called only when one is taken. loss: this rank's loss (a
        tensor is read only on progress steps). samples: this rank's samples in the step (for samples/s).
        epoch: the script's own epoch, if it counts any (shown with the progress; none: no epoch shown).
        """
        if self._leaving:
            raise RuntimeError(f"ctx.step() returned True at step {self._last_step}: the script must return then")
        if not self._calls_step:
            raise RuntimeError("ctx.step(): the job spec says run.calls_step: false (the script takes no steps)")
        if not self._started:
            self._begin(step - 1)
        self._last_step = step
        self._window_samples += samples
        leave = self._checkpointer.after_step(step, state, epoch)
        if not leave and self._trainers.any(self._stop.asked):
            self._checkpointer.stopped(step, state, epoch)
            leave = True
        if step % self._spec.log_every == 0 or step == self.total_steps or leave:
            self._progress(step, epoch, float(loss.detach() if isinstance(loss, torch.Tensor) else loss))
        self._leaving = leave
        return leave

    def log(self, step: int, **scalars: float | torch.Tensor) -> None:
        """Scalars of `step` (e.g. loss=loss, accuracy=acc) for the job's TensorBoard files and `deepvm watch`.

        Any rank may call it; trainer 0's points are the run's. It returns at once: a tensor is read and the
        point sent by a thread of its own, off the step's path. ValueError for a name or value TensorBoard
        would not take (names: letters, digits, _ . / -; `train/loss` groups under `train`)."""
        self._metrics.log(step, scalars)

    @property
    def took_no_step(self) -> bool:
        """For deepvm's runner, once the script returned: it had steps to train and reported none (a script
        that forgot ctx.step(), or returned early); the job then fails instead of completing at step 0."""
        return self._last_step == 0 and self.start_step < self.total_steps

    def finish(self) -> RunMetrics:
        """For deepvm's runner, once the script returned: the End event; the run's metrics."""
        status = EndStatus.STOPPED if self._leaving else EndStatus.COMPLETED
        steps = max(self._last_step, self.start_step)
        final_loss = self._curve[-1][1] if self._curve else float("nan")
        self._metrics.close()  # the points logged so far leave before End
        emit(End(rank=self.rank, status=status, steps=steps, final_loss=final_loss))
        return RunMetrics(
            job=self._spec.name,
            status=status,
            script=self._script,
            synthetic=False,  # whatever the script trains on, deepvm did not make it up
            world_size=self.world_size,
            first_step=self.start_step,
            steps=steps,
            total_steps=self.total_steps,
            final_loss=final_loss,
            loss_curve=tuple(self._curve),
            wall_s=round(time.perf_counter() - self._started_at, 3),
        )

    def _begin(self, first_step: int) -> None:
        self._started, self.start_step, self._started_at = True, first_step, time.perf_counter()
        emit(
            Start(
                rank=self.rank,
                job=self._spec.name,
                script=self._script,
                synthetic=False,
                world_size=self.world_size,
                planned_world_size=self.planned_world_size,
                total_steps=self.total_steps,
                first_step=first_step,
                device=str(self.device),
                pid=os.getpid(),
            )
        )
        self._window_start = time.perf_counter()

    def _progress(self, step: int, epoch: int | None, loss: float) -> None:
        global_loss = self._trainers.mean(loss)
        self._curve.append((step, global_loss))
        now = time.perf_counter()
        rate = self._window_samples / max(now - self._window_start, 1e-9)
        emit(
            Step(
                rank=self.rank,
                step=step,
                epoch=epoch,
                loss=round(loss, 6),
                global_loss=round(global_loss, 6),
                samples_per_s=round(rate, 2),
                synthetic=False,
            )
        )
        self._window_samples, self._window_start = 0, now
