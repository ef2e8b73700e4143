"""training.node.rank under a real local mpirun: DeepCheck roles, a Spot notice from a real IMDSv2 endpoint
flushes and stops every trainer at one step, and a smaller world resumes from exactly that step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from imds import clear_notices, imds_endpoint, post_notice
from worker_jobs import events_with_a_notice_at, launch_ranks

JOB = """\
name: rank-test
seed: 3
model: {name: resnet18, num_classes: 4}
dataset: {kind: synthetic, samples: 96, image_shape: [3, 8, 8], classes: 4, seed: 0}
steps: 40
batch_size: 4
log_every: 1
optimizer: {name: sgd, lr: 0.02, momentum: 0.9}
schedule: {name: cosine, warmup_steps: 1}
checkpoint: {every_steps: 4}
env: {OMP_NUM_THREADS: "1"}
"""

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun"),
]


def test_notice_flushes_stops_and_a_smaller_world_resumes_there(tmp_path, warm):
    with imds_endpoint(tmp_path) as url:
        run_and_resume(tmp_path, url, tmp_path, warm)


def run_and_resume(tmp_path: Path, url: str, host_dir: Path, warm: Path) -> None:
    """Both launches' ranks start as on a node, from its warm server (`warm`)."""
    (tmp_path / "job.yaml").write_text(JOB)
    proc = launch_ranks(tmp_path / "job.yaml", "trainer,trainer,holder", url, warm=warm)
    events = events_with_a_notice_at(proc, 5, lambda: post_notice(host_dir), timeout=120)
    kinds = [e["event"] for e in events]
    assert "holder" in kinds and kinds.count("notice") >= 1
    saved = [e["step"] for e in events if e["event"] == "saved"]
    assert saved and all(s % 4 == 0 for s in saved)
    # a checkpoint counts once safe on the holder's disk (the plan's safe_level): after it was taken, never ahead
    safe = [e for e in events if e["event"] == "safe"]
    taken = saved + [e["step"] for e in events if e["event"] == "flush"]
    assert safe and all(e["level"] == "L2" and e["step"] in taken for e in safe), safe
    assert kinds.index("safe") > kinds.index("saved")
    # post_notice writes a rebalance and then the interruption: a watcher's poll between the two sees the
    # rebalance alone, and its early flush comes first
    flushes = [e for e in events if e["event"] == "flush"]
    assert [e["reason"] for e in flushes] in (["notice"], ["rebalance", "notice"])
    flush = flushes[-1]
    assert flush["level"] in ("L1", "L2")
    ends = [e for e in events if e["event"] == "end"]
    assert {e["status"] for e in ends} == {"stopped"} and {e["steps"] for e in ends} == {flush["step"]}
    assert 5 < flush["step"] < 40  # the notice came at step 5; the watcher polls every 2 s (40 steps: time for it)

    # the checkpoint stays on the holder's disk: one trainer picks it up at exactly that step
    clear_notices(host_dir)
    proc = launch_ranks(tmp_path / "job.yaml", "trainer,holder", url, warm=warm)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    (restored,) = [e for e in events if e["event"] == "restored"]
    (start,) = [e for e in events if e["event"] == "start"]
    assert restored["step"] == start["first_step"] == flush["step"]
    assert start["world_size"] == 1 and start["global_batch"] == 8  # per_trainer_batch keeps 2 x 4
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert (metrics["status"], metrics["first_step"], metrics["steps"]) == ("completed", flush["step"], 40)


def test_a_holders_rank_imports_no_torch():
    """Only trainers import torch (training.node.rank.train): a relaunch's new world waits for its slowest
    rank, and on a small CPU holder node torch's import would be that rank's seconds."""
    import subprocess
    import sys

    probe = "import sys, training.node.rank; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], cwd=Path(__file__).parents[2]).returncode == 0
