"""The worker under a real `mpirun -np 2`: progress lines from both ranks, determinism, clean stop.

Exact resume from a saved state is covered in-process (test_worker_inprocess.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from worker_jobs import free_port, through, tiny_job

from training.node.models import build_model

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun"),
]


def mpirun(job: Path, out: Path, *worker_args: str, np: int = 2, warm: Path | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    command = [
        "mpirun",
        "-np",
        str(np),
        "--oversubscribe",
        "--bind-to",
        "none",
        "-x",
        "PYTHONPATH",
        "-x",
        f"MASTER_PORT={free_port()}",
        sys.executable,
        "-m",
        *through(warm),
        "training.node.worker",
        str(job),
        "--out",
        str(out),
        "--threads",
        "1",
        *worker_args,
    ]
    return subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def finish(proc: subprocess.Popen) -> tuple[list[dict], str]:
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr
    return events(stdout), stderr


def stop_after_first_step(proc: subprocess.Popen) -> list[dict]:
    """Read progress until training is under way, then SIGTERM one rank, as a Spot notice would."""
    seen, pids = [], []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            seen.append(json.loads(line))
            if seen[-1]["event"] == "start":
                pids.append(seen[-1]["pid"])
            if seen[-1]["event"] == "step":
                os.kill(pids[-1], signal.SIGTERM)
                return seen
    raise AssertionError("the run ended before its first progress line")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, warm):
    """Three launches of one seeded job at once (start-up dominates, so they overlap): two run to
    the end, the third is stopped by SIGTERM after its first progress line. "b"'s ranks start cold, the
    others' as on a node, forks of its warm server: the same seed gives the same curve either way."""
    root = tmp_path_factory.mktemp("mpi")
    job = tiny_job(root, steps=6)
    procs = [mpirun(job, root / name, warm=None if name == "b" else warm) for name in ("a", "b", "stopped")]
    head = stop_after_first_step(procs[2])
    lines = [finish(p)[0] for p in procs]
    lines[2] = head + lines[2]
    return {name: (root / name, lines[i]) for i, name in enumerate(("a", "b", "stopped"))}


def test_both_ranks_log_progress_and_rank0_saves(runs):
    out, lines = runs["a"]
    steps = [(e["rank"], e["step"]) for e in lines if e["event"] == "step"]
    assert sorted(steps) == [(0, 2), (0, 4), (0, 6), (1, 2), (1, 4), (1, 6)]
    for e in lines:
        if e["event"] == "step":
            assert {"epoch", "loss", "global_loss", "lr", "samples_per_s"} <= set(e) and e["synthetic"] is True
    starts = [e for e in lines if e["event"] == "start"]
    assert sorted(e["rank"] for e in starts) == [0, 1] and all(e["world_size"] == 2 for e in starts)
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["status"], metrics["steps"], metrics["world_size"], metrics["global_batch"]) == (
        "completed",
        6,
        2,
        8,
    )
    build_model("resnet18", 4, width=8).load_state_dict(torch.load(out / "model.pt"))  # the job's whole model
    assert (out / "state.pt").exists()


def test_same_seed_gives_identical_loss_curve(runs):
    first, second = (json.loads((runs[name][0] / "metrics.json").read_text()) for name in ("a", "b"))
    assert first["loss_curve"] == second["loss_curve"]
    assert first["final_loss"] == second["final_loss"]


def test_sigterm_on_one_rank_stops_all_cleanly(runs):
    out, lines = runs["stopped"]
    stopped = json.loads((out / "metrics.json").read_text())
    assert stopped["status"] == "stopped" and 2 <= stopped["steps"] < 6
    ends = [e for e in lines if e["event"] == "end"]
    assert sorted(e["rank"] for e in ends) == [0, 1] and {e["steps"] for e in ends} == {stopped["steps"]}
    state = torch.load(out / "state.pt", weights_only=False)
    assert state["step"] == stopped["steps"] and state["sampler"]["offset"] == 8 * stopped["steps"]
