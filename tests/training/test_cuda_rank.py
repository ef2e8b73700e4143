"""training.node.rank on a GPU under a real local mpirun: a CUDA trainer (NCCL process group) and a holder,
a Spot notice from a real IMDSv2 endpoint, DeepCheck's flush from pinned staging, and a relaunch that resumes
on the GPU at exactly the flushed step. Runs only where CUDA and mpirun are; CI has no GPU and skips it."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from imds import clear_notices, imds_endpoint, post_notice
from worker_jobs import events_with_a_notice_at, launch_ranks

STEPS = 3000
JOB = f"""\
name: cuda-rank
seed: 3
model: {{name: resnet18, num_classes: 10}}
dataset: {{kind: synthetic, samples: 4096, image_shape: [3, 32, 32], classes: 10, seed: 0}}
steps: {STEPS}
batch_size: 64
log_every: 10
optimizer: {{name: sgd, lr: 0.02, momentum: 0.9}}
schedule: {{name: cosine, warmup_steps: 10}}
checkpoint: {{every_steps: 100}}
"""

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.mpi,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _events(lines: list[str]) -> list[dict]:
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_a_gpu_trainer_flushes_on_a_notice_and_resumes_on_the_gpu_there(tmp_path):
    (tmp_path / "job.yaml").write_text(JOB)
    with imds_endpoint(tmp_path) as url:
        proc = launch_ranks(tmp_path / "job.yaml", "trainer,holder", url, planned_trainers=1)
        events = events_with_a_notice_at(proc, 200, lambda: post_notice(tmp_path), timeout=300)
        (start,) = [e for e in events if e["event"] == "start"]
        assert start["device"].startswith("cuda"), start
        (flush,) = [e for e in events if e["event"] == "flush"]
        assert flush["reason"] == "notice" and 200 < flush["step"] < STEPS
        assert {e["steps"] for e in events if e["event"] == "end"} == {flush["step"]}

        clear_notices(tmp_path)
        proc = launch_ranks(tmp_path / "job.yaml", "trainer,holder", url, planned_trainers=1)
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
    events = _events(stdout.splitlines())
    (restored,) = [e for e in events if e["event"] == "restored"]
    (start,) = [e for e in events if e["event"] == "start"]
    assert start["device"].startswith("cuda") and restored["step"] == start["first_step"] == flush["step"]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert (metrics["status"], metrics["first_step"], metrics["steps"]) == ("completed", flush["step"], STEPS)
    print(f"\nflush at step {flush['step']}: {flush}\nrestored: {restored}\nfinal loss {metrics['final_loss']}")
