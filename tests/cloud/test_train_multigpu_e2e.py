"""`deepvm train` on a multi-GPU instance type in the sandbox: one trainer rank per GPU.

The planner credits a g4dn.12xlarge with all four of its GPUs, so the job must run four trainers on it,
with consecutive MPI ranks and LOCAL_RANK 0..3 (which picks the GPU on a real node; the sandbox host
has none, so they train on its CPU), all in one DDP group and one DeepCheck world with the holder.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from provisioning.catalog.model import Market
from provisioning.planner.plan import Architecture, NodeGroup, Plan, Role
from tests.cloud.plans import AZ, snapshot_price
from tests.cloud.sandbox_cluster import sandbox_cluster

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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The environment of a sandbox cluster of one 4-GPU spot trainer and an on-demand holder (a scenario that
    needs such a node joins it here)."""
    with sandbox_cluster(tmp_path_factory.mktemp("multigpu"), "mg", _plan()) as env:
        yield env


def test_a_four_gpu_node_runs_four_trainer_ranks(cluster, tmp_path, cli):
    env = cluster
    job = tmp_path / "job" / "multigpu.yaml"
    job.parent.mkdir()
    job.write_text(JOB)
    train = cli("train", str(job), "--cluster", "mg", "--json", "--controller", "local", env=env)
    assert train.returncode == 0, train.stderr[-3000:]
    run = json.loads(train.stdout)
    metrics = json.loads((Path(env["DEEPVM_HOME"]) / "jobs" / run["job_id"] / "metrics.json").read_text())
    assert (metrics["status"], metrics["steps"], metrics["world_size"]) == ("completed", 8, 4)
    assert metrics["rank_batches"] == [4, 4, 4, 4] and metrics["global_batch"] == 16
    (note,) = [line for line in train.stderr.splitlines() if line.startswith("attempt 1:")]
    assert note.startswith("attempt 1: 4 trainers + 1 holder (") and " x4" in note
    status = json.loads(cli("status", "mg", "--json", env=env).stdout)
    assert status["jobs"][0]["world_size"] == 4
