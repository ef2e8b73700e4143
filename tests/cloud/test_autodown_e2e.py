"""Autodown end to end in the sandbox (issue 25, point 5): a detached job with --down-when-done completes; its
head copies the outputs to S3 and takes the cluster down, itself last; the next command here finishes the
teardown and says so; nothing of the cluster runs; `deepvm fetch` brings model.pt and metrics.json from S3;
cost-report shows the cluster ended. Its own small cluster: autodown ends it, so it cannot join another
module's."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest

from tests.cloud import procs
from tests.cloud.managed_rig import job_yaml
from tests.cloud.plans import make_tiering_plan
from tests.conftest import run_cli

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox boots namespaced sshd hosts and needs root"),
]


def _ok(env: dict[str, str], *args: str, timeout: float = 300):
    result = run_cli(*args, env=env, timeout=timeout)
    assert result.returncode == 0, f"deepvm {' '.join(args)}: {result.stderr[-3000:]}"
    return result


@pytest.mark.timeout(600)
def test_a_detached_job_with_autodown_completes_and_its_cluster_is_gone_with_its_outputs_in_s3(tmp_path):
    env = {"DEEPVM_HOME": str(tmp_path / "home")}
    (tmp_path / "plan.json").write_text(json.dumps(make_tiering_plan(spot=1).to_dict()))
    job = tmp_path / "job.yaml"
    job.write_text(job_yaml(10, f"ad-{uuid.uuid4().hex[:6]}"))
    _ok(env, "up", "--plan", str(tmp_path / "plan.json"), "--name", "ad", "--cloud", "sandbox", "--yes", "--json",
        timeout=180)  # fmt: skip
    try:
        _ok(env, "train", str(job), "--cluster", "ad", "--detach", "--down-when-done", "--json")
        job_id = json.loads(_ok(env, "jobs", "ad", "--json").stdout)[0]["job_id"]
        deadline = time.monotonic() + 240
        while "was taken down by its head" not in (said := run_cli("status", env=env, timeout=120).stderr):
            assert time.monotonic() < deadline, said[-2000:]
            time.sleep(3)
        said = " ".join(said.split())  # the console wraps its lines
        assert "finished its teardown here" in said and f"(job {job_id} completed)" in said
        time.sleep(5)  # a terminated sandbox host's processes end with it
        assert procs.node_processes(env["DEEPVM_HOME"]) == {}
        out = tmp_path / "fetched"
        _ok(env, "fetch", job_id, "--out", str(out))
        assert (out / "model.pt").stat().st_size > 0 and json.loads((out / "metrics.json").read_text())
        bills = json.loads(_ok(env, "cost-report", "--json").stdout)["clusters"]
        (bill,) = [b for b in bills if b["name"] == "ad"]
        assert bill["status"] == "terminated", bill
        summary = json.loads(_ok(env, "status", job_id, "--json").stdout)
        assert summary["status"] == "completed" and summary["cluster_down"] == f"job {job_id} completed"
    finally:
        run_cli("down", "ad", "--yes", env=env, timeout=300)
        run_cli("sandbox", "stop", env=env, timeout=120)
