"""The money guard end to end in the sandbox (issue 25), on two small clusters, each booted once and each ended by
its head, with nothing left to `deepvm down`:

- cluster "ad": a job followed in the foreground stops at `--max-duration` (exit 130, as a stopped job) with its
  newest checkpoint, log and summary copied to the cluster's bucket; then a detached job with `--down-when-done`
  and `--notify URL` completes, its head tells the test's HTTP server (completion, autodown: in order, signed)
  and takes the cluster down; the next command here finishes the teardown and says so; nothing of the cluster
  runs; `deepvm fetch` brings model.pt and metrics.json from S3; cost-report shows the cluster ended;
- cluster "ab", made with `up --autodown`: the first job resumes there from its checkpoint in ad's bucket
  (`train --resume`: its new head downloads it, training/head/resume.py), at the step it stopped, to its end;
  with no job after it, the head's idle watch takes the cluster down, and the next command here says so.

A sandbox host shares this machine's network namespace (provisioning/sandbox/hosts.py: `unshare --pid
--mount`, no network namespace), so the head reaches the test's HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from provisioning.clusters.store import Store
from tests.cloud import procs
from tests.cloud.managed_rig import SANDBOX_ONLY, job_yaml, release_the_pace, sandbox_client, write_job
from tests.cloud.plans import make_tiering_plan
from tests.conftest import deepvm_line, run_cli
from tests.training.notify_receiver import Receiver

pytestmark = SANDBOX_ONLY
SECRET = "autodown-e2e-notify-secret"
STEPS = 160  # the paced job: at 0.5 s a step it outlasts its time limit, and trains at full speed once released
MAX_HOURS = 0.015  # 54 s from the job's start: under a loaded suite its ranks once took 36 s to their first checkpoint
AUTODOWN_MIN = 0.75  # time for `train --resume` to submit its job; a tenth of it is the idle watch's poll


class Home:
    """The module's DEEPVM_HOME and its CLI, with what every command of it said."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {"DEEPVM_HOME": str(root / "home")}
        (root / "home").mkdir()
        config = root / "home" / "config.yaml"
        config.write_text(f"notify_secret: {SECRET}\n")
        config.chmod(0o600)
        (root / "plan.json").write_text(json.dumps(make_tiering_plan(spot=1).to_dict()))
        self.said: list[str] = []  # every command's stderr, words joined (the console wraps its lines)

    def run(self, *args: str, code: int = 0, timeout: float | None = None) -> str:
        """`deepvm ARGS`, its stdout. In this process (main_in_process: `status`, `jobs`, `fetch` each cost 2 CPU-s
        of imports and a head's login as a process, and `taken_down` polls), or, given a `timeout` (`up`,
        `train`: minutes, and what they start outlives them), as a process that can be cut off."""
        result = deepvm_line(*args, env=self.env, timeout=timeout)
        self.said.append(" ".join(result.stderr.split()))
        assert result.returncode == code, f"deepvm {' '.join(args)}: exit {result.returncode}\n{result.stderr[-3000:]}"
        return result.stdout

    def up(self, name: str, *flags: str) -> None:
        self.run(
            "up",
            "--plan",
            str(self.root / "plan.json"),
            "--name",
            name,
            "--cloud",
            "sandbox",
            "--yes",
            "--json",
            *flags,
            timeout=180,
        )

    def job(self, job_id: str) -> dict:
        (found,) = [j for j in json.loads(self.run("jobs", "--json")) if j["job_id"] == job_id]
        return found

    def bucket(self, name: str) -> str:
        """The outputs bucket deepvm made for cluster `name`."""
        with pytest.MonkeyPatch.context() as patch:  # each test has a home of its own (tests/conftest.py)
            patch.setenv("DEEPVM_HOME", self.env["DEEPVM_HOME"])
            row = Store().cluster(name)
        assert row is not None and row.resources.outputs_bucket, row
        return row.resources.outputs_bucket

    def taken_down(self, name: str, timeout_s: float) -> str:
        """Ask `status` until a command here said that cluster `name` was taken down by its head; that line."""
        deadline = time.monotonic() + timeout_s
        while not (found := [s for s in self.said if f"cluster {name} was taken down by its head" in s]):
            assert time.monotonic() < deadline, self.said[-1][-2000:]
            time.sleep(3)
            self.run("status")
        assert len(found) == 1, found  # said once, by the command that finished the teardown
        return found[0]

    def nothing_runs(self) -> None:
        deadline = time.monotonic() + 30  # a terminated sandbox host's processes end with it, within moments
        while (left := procs.node_processes(self.env["DEEPVM_HOME"])) and time.monotonic() < deadline:
            time.sleep(1)
        assert left == {}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    made = Home(tmp_path_factory.mktemp("autodown-e2e"))
    try:
        yield made
    finally:
        for name in ("ad", "ab"):
            run_cli("down", name, "--yes", "--cancel-jobs", env=made.env, timeout=300)
        run_cli("sandbox", "stop", env=made.env, timeout=120)


@pytest.fixture(scope="module")
def stopped(home):
    """(job file, job id, step) of a job on cluster "ad" that stopped at its time limit."""
    home.up("ad")
    jobs = home.root / "jobs"
    jobs.mkdir()
    job = write_job(jobs, STEPS, "limited", paced=True)
    home.run("train", str(job), "--cluster", "ad", "--max-duration", str(MAX_HOURS), code=130, timeout=400)
    assert f"deepvm: stopped at its time limit (--max-duration {MAX_HOURS:g} h)" in home.said[-1], home.said[-1]
    job_id = json.loads(home.run("jobs", "ad", "--json"))[0]["job_id"]
    state = home.job(job_id)
    assert state["status"] == "stopped" and 0 < state["checkpoint_step"] == state["step"] < STEPS, state
    return job, job_id, state["step"]


@pytest.mark.timeout(600)
def test_a_job_stopped_at_its_time_limit_leaves_its_checkpoint_in_s3_and_an_autodown_job_ends_the_cluster(
    home, stopped
):
    _, job_id, step = stopped
    bucket = home.bucket("ad")  # the job names no S3 prefix of its own
    listed = sandbox_client(home.env, "s3").list_objects_v2(Bucket=bucket, Prefix=f"deepvm-jobs/{job_id}/")
    keys = {o["Key"] for o in listed["Contents"]}
    base = f"deepvm-jobs/{job_id}"
    assert {f"{base}/log.jsonl", f"{base}/summary.json", f"{base}/out/metrics.json"} <= keys, sorted(keys)
    checkpoints = {k.split("/")[3] for k in keys if k.startswith(f"{base}/checkpoint/")}
    (newest,) = checkpoints  # ckpt-STEP-RUN: the newest only, of the step the job stopped at
    assert int(newest.split("-")[1]) == step and f"{base}/checkpoint/{newest}/manifest.json" in keys, sorted(keys)
    assert any(k.startswith(f"{base}/checkpoint/{newest}/shard-") for k in keys), sorted(keys)

    receiver = Receiver()
    try:
        job = home.root / "jobs" / "done.yaml"
        job.write_text(job_yaml(10, "autodown-done"))
        home.run(
            "train", str(job), "--cluster", "ad", "--detach", "--down-when-done", "--notify", receiver.url, timeout=300
        )
        done_id = next(j["job_id"] for j in json.loads(home.run("jobs", "--json")) if j["name"] == "autodown-done")
        said = home.taken_down("ad", timeout_s=240)
        assert "finished its teardown here" in said and f"(job {done_id} completed)" in said, said
        events = receiver.signed_events(SECRET.encode())
    finally:
        receiver.close()
    assert [(e["event"], e["job_id"]) for e in events] == [("completion", done_id), ("autodown", done_id)]
    assert events[0]["summary"]["status"] == "completed"
    home.nothing_runs()
    out = home.root / "fetched"
    home.run("fetch", done_id, "--out", str(out))
    assert (out / "model.pt").stat().st_size > 0 and json.loads((out / "metrics.json").read_text())
    (bill,) = [b for b in json.loads(home.run("cost-report", "--json"))["clusters"] if b["name"] == "ad"]
    assert bill["status"] == "terminated", bill
    summary = json.loads(home.run("status", done_id, "--json"))
    assert summary["status"] == "completed" and summary["cluster_down"] == f"job {done_id} completed"


@pytest.mark.timeout(600)
def test_the_stopped_job_resumes_on_a_new_cluster_from_s3_which_goes_down_once_it_has_no_job(home, stopped):
    job, job_id, step = stopped
    home.up("ab", "--autodown", str(AUTODOWN_MIN))
    release_the_pace(home.env, "limited")  # from its checkpoint on, the job trains at full speed
    home.run("train", str(job), "--cluster", "ab", "--resume", timeout=400)
    state = home.job(job_id)
    assert (state["status"], state["step"], state["cluster"]) == ("completed", STEPS, "ab"), state
    assert state["lost_steps"] == 0, state  # it stopped with a checkpoint of its step, and went on from there
    log = home.run("logs", job_id)
    assert f"resumed at step {step}, 0 steps lost" in log, log[-3000:]
    said = home.taken_down("ab", timeout_s=AUTODOWN_MIN * 60 + 120)
    assert f"(no job for {AUTODOWN_MIN:g} minutes (up --autodown))" in said and "finished its teardown here" in said
    home.nothing_runs()
    out = home.root / "fetched-resumed"  # a job on a cluster its head may take down copies its outputs at its end
    home.run("fetch", job_id, "--out", str(out))
    assert json.loads((out / "metrics.json").read_text())["steps"] == STEPS
