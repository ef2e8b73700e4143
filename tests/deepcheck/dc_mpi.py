"""Helpers for DeepCheck tests that start real `mpirun` jobs on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"


def mpirun_cmd(n: int, script: str, *args: str) -> list[str]:
    return [
        "mpirun",
        "-n",
        str(n),
        "--oversubscribe",
        "--bind-to",
        "none",
        "--mca",
        "btl",
        "self,vader",
        sys.executable,
        "-W",
        "ignore",
        str(WORKERS / script),
        *args,
    ]


def mpi_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
        PYTHONPATH=str(ROOT),
        OMP_NUM_THREADS="1",
    )
    env.update(extra)
    return env


def run_mpi(n: int, script: str, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    """Run an MPI job to completion; fail the test with its output if it fails."""
    proc = subprocess.run(
        mpirun_cmd(n, script, *args),
        env=mpi_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        pytest.fail(f"mpirun {script} {args} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc
