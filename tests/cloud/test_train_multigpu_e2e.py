"""`deepvm train` on a multi-GPU instance type in the sandbox: one trainer rank per GPU.

The planner credits a g4dn.12xlarge with all four of its GPUs, so the job must run four trainers on it,
with consecutive MPI ranks and LOCAL_RANK 0..3 (which picks the GPU on a real node; the sandbox host
has none, so they train on its CPU), all in one DDP group and one DeepCheck world with the holder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from provisioning.catalog.model import Market
from provisioning.planner.plan import Architecture, NodeGroup, Plan, Role
from tests.cloud.plans import AZ, snapshot_price
from tests.conftest import REPO, run_cli

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox boots namespaced sshd hosts and needs root"),
]

NAME = f"multigpu-{uuid.uuid4().hex[:8]}"
JOB = f"""\
name: {NAME}
model: {{name: resnet18, num_classes: 10}}
dataset: {{kind: synthetic, samples: 256, image_shape: [3, 8, 8], classes: 10, seed: 0}}
steps: 8
batch_size: 4
log_every: 1
checkpoint: {{every_steps: 4, levels: [l1, l2], buffer_slots: 2}}
env: {{OMP_NUM_THREADS: "1"}}
"""


def _plan() -> Plan:
    groups = (
        NodeGroup("g4dn.12xlarge", Market.SPOT, 1, Role.TRAINER, snapshot_price("g4dn.12xlarge", Market.SPOT)),
        NodeGroup("c5.xlarge", Market.ON_DEMAND, 1, Role.HOLDER, snapshot_price("c5.xlarge", Market.ON_DEMAND)),
    )
    return Plan(
        architecture=Architecture.TIERING,
        region=AZ[:-1],
        availability_zone=AZ,
        nodes=groups,
        price_per_hour=sum(g.count * g.usd_per_hour for g in groups),
        effective_flops=260.0,
        objective_value=1.0,
        catalog_source="snapshot",
        prices_as_of="2026-11-01T00:00:00Z",
    )


def test_a_four_gpu_node_runs_four_trainer_ranks(tmp_path):
    env = {"DEEPVM_HOME": str(tmp_path / "home")}
    (tmp_path / "plan.json").write_text(json.dumps(_plan().to_dict()))
    job = tmp_path / "job" / "multigpu.yaml"
    job.parent.mkdir()
    job.write_text(JOB)
    up = run_cli("up", "--yes", "--plan", str(tmp_path / "plan.json"), "--name", "mg", "--cloud", "sandbox", "--json",
                 env=env, timeout=180)
    assert up.returncode == 0, up.stderr
    try:
        train = subprocess.run(
            [sys.executable, "-m", "deepvm_cli", "train", str(job), "--cluster", "mg", "--json",
             "--controller", "local"],
            cwd=REPO,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert train.returncode == 0, train.stderr[-3000:]
        run = json.loads(train.stdout)
        metrics = json.loads((tmp_path / "home" / "jobs" / run["job_id"] / "metrics.json").read_text())
        assert (metrics["status"], metrics["steps"], metrics["world_size"]) == ("completed", 8, 4)
        assert metrics["rank_batches"] == [4, 4, 4, 4] and metrics["global_batch"] == 16
        (note,) = [line for line in train.stderr.splitlines() if line.startswith("attempt 1:")]
        assert note.startswith("attempt 1: 4 trainers + 1 holder (") and " x4" in note
        status = json.loads(run_cli("status", "mg", "--json", env=env).stdout)
        assert status["jobs"][0]["world_size"] == 4
    finally:
        down = run_cli("down", "mg", "--yes", env=env, timeout=180)
        run_cli("sandbox", "stop", env=env, timeout=120)
    assert down.returncode == 0, down.stderr
