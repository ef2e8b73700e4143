"""The program every rank runs: `python -m training.node.worker JOB.yaml --out DIR` under mpirun.

It trains the job's model with DDP on its slice of each global batch and prints one JSON object per
line on stdout (training.shared.events: Start, Step every log_every steps and at the last, End), every line
tagged with the rank, so the launcher can parse progress from mpirun's merged output. Rank 0 writes
model.pt (weights), state.pt (a TrainState to resume from) and metrics.json (training.shared.metrics)
into --out.

SIGTERM or SIGUSR1 on any rank asks for a clean stop: the ranks agree at the next step boundary,
save state like a finished run and exit 0 with status "stopped" in the metrics. A hook can end the run
the same way by returning True from on_step (on every rank at the same step). Under `deepvm train`
(training.node.rank) a stopped run writes only its metrics: DeepCheck's flushed checkpoint is what the
relaunch restores, and writing the model and state there (hundreds of MB) would only delay it.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import signal
import sys
import time
import traceback
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from provisioning.core.errors import DeepvmError, InputError
from training.node.batchplan import BatchPlan, plan_batches
from training.node.data import ImageDataset, build_dataset
from training.node.distenv import DistEnv, from_environment, init_process_group, pick_device
from training.node.hooks import CheckpointHook, TrainState
from training.node.metrics_log import MetricsLog
from training.node.models import build_model
from training.node.sampler import GlobalBatchSampler
from training.node.schedule import build_optimizer, lr_factor, set_lr
from training.shared.events import End, EndStatus, Start, Step, emit
from training.shared.jobspec import JobSpec, load_job_spec
from training.shared.metrics import RunMetrics
from training.shared.scalars import LOSS

RANK_BATCHES_ENV = "DEEPVM_RANK_BATCHES"


@dataclass(frozen=True)
class WorkerOptions:
    """Command-line options of the worker (the job itself is in the spec)."""

    job: Path
    out: Path
    master_addr: str | None = None  # default: $MASTER_ADDR, else 127.0.0.1
    master_port: int | None = None  # default: $MASTER_PORT, else 29500
    rank_batches: tuple[int, ...] | None = None  # per-rank batch sizes (mixed plans); else from policy
    planned_world_size: int | None = None  # trainers the job was planned for; default: world size
    resume: Path | None = None  # a state.pt to continue from
    stop_at_step: int | None = None  # stop cleanly after this step, as if asked to
    device: str = "auto"  # auto | cpu | cuda
    threads: int | None = None  # torch intra-op threads; default: cores / ranks on this node
    save_when_stopped: bool = True  # a stopped run writes model.pt and state.pt (False: a checkpoint hook keeps it)
    log_metrics: bool = True  # trainer 0 sends WORKER_SCALARS at its progress steps (False: benchmarks/metrics_cost.py)


def parse_args(argv: Sequence[str] | None = None) -> WorkerOptions:
    parser = argparse.ArgumentParser(prog="python -m training.node.worker", description=__doc__.splitlines()[0])
    parser.add_argument("job", type=Path, help="job spec YAML")
    parser.add_argument("--out", type=Path, required=True, help="directory for model, state and metrics")
    parser.add_argument("--master-addr")
    parser.add_argument("--master-port", type=int)
    parser.add_argument("--rank-batches", help=f"comma-separated batch size per rank (or ${RANK_BATCHES_ENV})")
    parser.add_argument("--planned-world-size", type=int)
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--stop-at-step", type=int)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--no-metrics", action="store_true", help="send no Metrics events (to measure their cost)")
    args = parser.parse_args(argv)
    text = args.rank_batches or os.environ.get(RANK_BATCHES_ENV)
    try:
        rank_batches = tuple(int(b) for b in text.split(",")) if text else None
    except ValueError:
        raise InputError(f"--rank-batches {text!r}: expected comma-separated integers") from None
    return WorkerOptions(
        job=args.job,
        out=args.out,
        master_addr=args.master_addr,
        master_port=args.master_port,
        rank_batches=rank_batches,
        planned_world_size=args.planned_world_size,
        resume=args.resume,
        stop_at_step=args.stop_at_step,
        device=args.device,
        threads=args.threads,
        log_metrics=not args.no_metrics,
    )


class StopRequest:
    """Set by SIGTERM/SIGUSR1 while installed; all ranks learn of it at the next step via an all-reduce."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

    def __init__(self) -> None:
        self.asked = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        self._previous = {sig: signal.signal(sig, self._ask) for sig in self.SIGNALS}
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _ask(self, _signum: int, _frame: object) -> None:
        self.asked = True

    def agreed(self, device: torch.device) -> bool:
        flag = torch.tensor([1 if self.asked else 0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def _total_steps(spec: JobSpec, sampler: GlobalBatchSampler) -> int:
    return spec.steps if spec.steps is not None else int(spec.epochs or 0) * sampler.steps_per_epoch


def _mean_over_ranks(value: float, device: torch.device) -> float:
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return float(tensor.item()) / dist.get_world_size()


class Run:
    """One rank's training run: built from the spec, then driven by train()."""

    def __init__(
        self,
        spec: JobSpec,
        env: DistEnv,
        opts: WorkerOptions,
        device: torch.device,
        hooks: Sequence[CheckpointHook],
    ):
        self.spec, self.env, self.opts, self.device, self.hooks = spec, env, opts, device, list(hooks)
        self.plan: BatchPlan = plan_batches(
            spec.batch_size,
            env.world_size,
            opts.planned_world_size or env.world_size,
            spec.shrink.keep_global_batch_by,
            opts.rank_batches,
        )
        self.dataset: ImageDataset = build_dataset(spec.dataset, train=True)
        torch.manual_seed(spec.seed)
        model = build_model(spec.model.name, spec.model.num_classes, spec.model.width).to(self.device)
        self.ddp = DistributedDataParallel(model, device_ids=[self.device] if self.device.type == "cuda" else None)
        self.base_lr = spec.optimizer.lr * self.plan.lr_scale
        optimizer = build_optimizer(spec.optimizer, model.parameters(), self.base_lr)
        try:
            sampler = GlobalBatchSampler(len(self.dataset), self.plan, env.rank, spec.seed)
        except ValueError as exc:
            raise InputError(f"{opts.job}: {exc}") from None
        self.state = TrainState(model, optimizer, sampler)
        if opts.resume is not None:
            self.state.load_state_dict(_load_state(opts.resume, self.device))
        self.total_steps = _total_steps(spec, sampler)
        self.loss_fn = nn.CrossEntropyLoss()
        self.metrics = MetricsLog(env.rank)

    def _batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed((self.spec.seed * 1_000_003 + step) * 1009 + self.env.rank)
        x, y = self.dataset.batch(self.state.sampler.indices(), gen)
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def _one_step(self) -> float:
        """Forward, backward, update; returns this rank's mean loss."""
        state = self.state
        set_lr(state.optimizer, self.base_lr * lr_factor(self.spec.schedule, state.step, self.total_steps))
        x, y = self._batch(state.step)
        state.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.ddp(x), y)
        (loss * self.plan.loss_weight(self.env.rank)).backward()
        state.optimizer.step()
        state.sampler.advance()
        state.step += 1
        return float(loss.item())

    def train(self, stop: StopRequest) -> RunMetrics:
        spec, state, rank = self.spec, self.state, self.env.rank
        for hook in self.hooks:
            hook.on_start(state)  # first: a hook may restore a checkpoint, and "start" reports from where
        emit(
            Start(
                rank=rank,
                job=spec.name,
                model=spec.model.name,
                dataset=spec.dataset.kind,
                synthetic=spec.is_synthetic,
                world_size=self.env.world_size,
                local_rank=self.env.local_rank,
                batch=self.plan.per_rank[rank],
                global_batch=self.plan.global_batch,
                lr=self.base_lr,
                total_steps=self.total_steps,
                first_step=state.step,
                device=str(self.device),
                pid=os.getpid(),
            )
        )
        first_step, status = state.step, EndStatus.COMPLETED
        final_loss = state.loss_curve[-1][1] if state.loss_curve else float("nan")
        started = window_start = time.perf_counter()
        window_steps = 0
        while state.step < self.total_steps:
            epoch = state.sampler.epoch
            loss = self._one_step()
            window_steps += 1
            # A logged step's point joins the curve before the hooks run, so that the checkpoint they take
            # at this step holds it (a resume at the last step then reports the run's final loss).
            logged = state.step % spec.log_every == 0 or state.step == self.total_steps
            if logged:
                final_loss = _mean_over_ranks(loss, self.device)
                state.loss_curve.append((state.step, final_loss))
            hook_stop = any([bool(hook.on_step(state, state.step)) for hook in self.hooks])  # call every hook
            stopping = stop.agreed(self.device) or hook_stop or state.step == self.opts.stop_at_step
            if stopping and not logged:  # every rank agrees to stop, so every rank takes part in the mean
                final_loss = _mean_over_ranks(loss, self.device)
                state.loss_curve.append((state.step, final_loss))
            if logged or stopping:
                now = time.perf_counter()
                rate = window_steps * self.plan.per_rank[rank] / max(now - window_start, 1e-9)
                emit(
                    Step(
                        rank=rank,
                        step=state.step,
                        epoch=epoch,
                        loss=round(loss, 6),
                        global_loss=round(final_loss, 6),
                        lr=state.optimizer.param_groups[0]["lr"],
                        samples_per_s=round(rate, 2),
                        synthetic=spec.is_synthetic,
                    )
                )
                if self.opts.log_metrics:
                    self._log_metrics(state.step, final_loss, window_steps, now - window_start)
                window_start, window_steps = now, 0
            if stopping:
                status = EndStatus.STOPPED
                break
        wall = time.perf_counter() - started
        for hook in self.hooks:
            hook.on_stop(state, state.step, status)
        trained = (state.step - first_step) * self.plan.global_batch
        metrics = RunMetrics(
            job=spec.name,
            status=status,
            model=spec.model.name,
            dataset=spec.dataset.kind,
            synthetic=spec.is_synthetic,
            seed=spec.seed,
            world_size=self.env.world_size,
            rank_batches=tuple(self.plan.per_rank),
            global_batch=self.plan.global_batch,
            lr=self.base_lr,
            first_step=first_step,
            steps=state.step,
            total_steps=self.total_steps,
            epoch=state.sampler.epoch,
            final_loss=final_loss,
            loss_curve=tuple(state.loss_curve),
            samples_per_s=trained / wall if wall > 0 else 0.0,
            wall_s=wall,
        )
        self.metrics.close()
        emit(End(rank=rank, status=status, steps=state.step, final_loss=final_loss, wall_s=round(wall, 3)))
        return metrics

    def _log_metrics(self, step: int, loss: float, steps: int, seconds: float) -> None:
        """WORKER_SCALARS of the window of `steps` steps that ended at `step`: the global loss, the job's
        samples per second (every trainer's), the learning rate and the mean step time."""
        seconds = max(seconds, 1e-9)
        self.metrics.log(
            step,
            {
                LOSS: loss,
                "samples_per_s": steps * self.plan.global_batch / seconds,
                "lr": self.state.optimizer.param_groups[0]["lr"],
                "step_time_s": seconds / steps,
            },
        )

    def save(self, metrics: RunMetrics) -> None:
        """Rank 0 writes model.pt and state.pt (unless a stopped run need not: WorkerOptions) and metrics.json,
        each under a temporary name, then renamed."""
        if self.env.rank != 0:
            return
        out = self.opts.out
        out.mkdir(parents=True, exist_ok=True)
        if metrics.status is EndStatus.COMPLETED or self.opts.save_when_stopped:
            _save_atomic(self.state.model.state_dict(), out / "model.pt")
            _save_atomic(self.state.state_dict(), out / "state.pt")
        metrics.write(out)


def _load_state(path: Path, device: torch.device) -> dict[str, Any]:
    """A state.pt written by a previous run (trusted: it comes from this job's own checkpoints)."""
    try:
        return torch.load(path, map_location=device, weights_only=False)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as exc:
        raise InputError(f"{path}: cannot resume from this state: {exc}") from None


def _save_atomic(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".part")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def run_training(spec: JobSpec, env: DistEnv, opts: WorkerOptions, hooks: Sequence[CheckpointHook] = ()) -> RunMetrics:
    """Join the group, train, save on rank 0, leave the group; returns the metrics (on every rank)."""
    local_cores = os.cpu_count() or 1
    torch.set_num_threads(opts.threads or max(1, local_cores // env.local_size))
    device = pick_device(opts.device, env)
    init_process_group(env, device)
    run: Run | None = None
    try:
        with StopRequest() as stop:
            run = Run(spec, env, opts, device, hooks)
            metrics = run.train(stop)
            run.save(metrics)
            dist.barrier()
        return metrics
    except BaseException as exc:
        traceback.clear_frames(exc.__traceback__)  # their locals hold the run, and with it DDP: see below
        raise
    finally:
        # DDP's Reducer goes before the group, or the ranks may never exit. The Reducer holds the process
        # group, and pybind11 frees it with the GIL held (pytorch/pytorch#56297): when it holds the group's last
        # reference, ~ProcessGroupGloo joins gloo's worker threads under the GIL while one of them, releasing a
        # finished work, waits for the GIL to drop its tensor's Python object (py-spy of a rank that never left
        # after its End: std::thread::join under ~Reducer against gil_scoped_acquire under ~AsyncBarrierWork,
        # about 1 in 8 stopped runs beside the test suite). The group's own binding releases the GIL before it
        # destructs, so the threads finish and the join returns.
        ddp = weakref.ref(run.ddp) if run is not None else None
        del run
        if ddp is not None and ddp() is not None:  # a model in a reference cycle: 90 ms of a full collection
            gc.collect()  # with torch loaded, paid only then (a rank's way out is on the relaunch's path)
        dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        opts = parse_args(argv)
        spec = load_job_spec(opts.job)
        if spec.run is not None:
            raise InputError(f"{opts.job}: its `run:` script runs under `deepvm train`, not in deepvm's worker")
        env = from_environment(master_addr=opts.master_addr, master_port=opts.master_port)
        run_training(spec, env, opts)
    except DeepvmError as exc:
        print(f"deepvm worker: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
