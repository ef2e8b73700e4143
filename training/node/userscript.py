"""Run the user's own script (the job spec's `run:`) on a trainer rank, with its JobContext attached.

In-process (runpy), not as a child process: DeepCheck's trainer side lives in this rank and shares the
MPI world with the holders, and the script reaches it through `training.job.attach()`. The script runs
as `python SCRIPT ARGS` would run it (`__main__`, sys.argv, its directory first on sys.path) from the job
directory. Afterwards trainer 0 writes metrics.json into the out directory and the rank leaves the
torch.distributed group if the script did not.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path

import torch.distributed as dist

from provisioning.core.errors import DeepvmError
from training import job
from training.node.checkpointing import Checkpointer
from training.node.distenv import DistEnv, pick_device
from training.node.trainercomm import TrainerComm
from training.node.worker import StopRequest
from training.shared.jobspec import JobSpec


class ScriptExited(DeepvmError):
    """The script called sys.exit with a failure status."""


class NoStepTaken(DeepvmError):
    """The script returned without a single ctx.step() while it had steps to train."""


def run_script(
    spec: JobSpec,
    job_file: Path,
    env: DistEnv,
    device: str,
    planned_world_size: int,
    out: Path,
    checkpointer: Checkpointer,
    trainers: TrainerComm,
) -> None:
    """Run the script to its end on this trainer (see the module docstring)."""
    assert spec.run is not None and spec.run.script is not None  # a ctx.step() job runs a script, never a command
    script = (job_file.parent / spec.run.script).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with StopRequest() as stop:
        ctx = job.JobContext(spec, env, pick_device(device, env), planned_world_size, out, checkpointer, trainers, stop)
        with job.attached(ctx), _as_main(script, spec.run.args, job_file.parent):
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    raise ScriptExited(f"{spec.run.script} exited with {exc.code!r}") from None
        if ctx.took_no_step:  # before finish(): no End event may call this launch completed
            raise NoStepTaken(
                f"{spec.run.script} returned without calling ctx.step() (at step {ctx.start_step} of "
                f"{ctx.total_steps}): report each step with ctx.step(), or set run.calls_step: false in the job "
                "spec if the script takes none"
            )
        metrics = ctx.finish()
    if env.rank == 0:
        metrics.write(out)
    if dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def _as_main(script: Path, args: list[str], cwd: Path) -> Iterator[None]:
    """sys.argv, sys.path and the working directory as `cd CWD && python SCRIPT ARGS` has them; restored after."""
    saved = sys.argv, list(sys.path), Path.cwd()
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.parent))
    os.chdir(cwd)
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved[0], saved[1]
        os.chdir(saved[2])
