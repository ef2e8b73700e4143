"""Managed training end to end in the sandbox (tests/cloud/managed_rig.py: the cluster and the helpers): a
job outlives the laptop, a controller crash and a notice; a detached job is cancelled after a checkpoint and
`down` guards a running job; a job that does not step ends at `--idle`; a head that dies is noticed by the
next command, which tears the rest of the cluster down.

The laptop test's job is the shipped example script held to a slow pace until the test has seen what it
waits for (paced_train.py): it outlasts the two minutes it must on any machine, and no more. So is the cancel
test's: a job the test stops needs no compute of its own, and a job training flat out would take both cores from
the scenarios beside it until its cancel (ResNet-18's built-in trainer under a managed job runs in
test_autodown_e2e.py).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cloud import procs
from tests.cloud.managed_rig import (
    EVERY,
    LAPTOP_STEPS,
    PACE_S,
    SANDBOX_ONLY,
    assert_each_node_pinned_to_its_own_key,
    assert_no_user_credentials,
    cli,
    detached,
    job_processes,
    job_state,
    local_deepvm,
    module_cluster,
    newest_job,
    node_processes,
    release_the_pace,
    replaced,
    run_on_head,
    sandbox_client,
    spot_trainer,
    wait_for,
    write_job,
)
from tests.conftest import REPO, run_cli

pytestmark = SANDBOX_ONLY

cluster = module_cluster("managed-e2e")  # (env, job directory) of the module's own cluster


@pytest.mark.timeout(900)  # it must train on for over two minutes after the laptop is gone
def test_job_outlives_the_laptop_a_controller_crash_and_a_notice(cluster):
    env, jobs = cluster
    job = write_job(jobs, LAPTOP_STEPS, "laptop", paced=True)
    train = subprocess.Popen(
        [sys.executable, "-m", "deepvm_cli", "train", str(job), "--cluster", "mg"],
        cwd=REPO,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert train.stderr is not None
    seen = []
    for line in train.stderr:
        seen.append(line)
        if line.startswith("step 10/"):
            break
    else:
        raise AssertionError("train ended before step 10:\n" + "".join(seen[-30:]))
    train.send_signal(signal.SIGKILL)  # the laptop is gone, and with it every deepvm process of the user
    train.wait()
    gone = time.monotonic()
    assert local_deepvm(env) == []
    job_id = newest_job(env)
    pid = run_on_head(env, f"cat deepvm/managed/jobs/{job_id}/service.pid").strip()
    run_on_head(env, f"kill -9 {pid}")  # and the controller on the head dies too
    while "recovered (controller-restart)" not in cli(env, "logs", job_id).stdout:
        assert time.monotonic() - gone < 180, "the controller did not come back"
        time.sleep(1)
    assert job_state(env, job_id)["controller_alive"]
    cli(env, "interrupt", spot_trainer(env), "--after", "30")
    time.sleep(max(0.0, 125 - (time.monotonic() - gone)))  # more than two minutes away
    state = job_state(env, job_id)
    assert state["status"] == "running" and state["step"] > 10, state
    while not replaced(cli(env, "logs", job_id).stdout):  # the node that got the notice is replaced...
        assert time.monotonic() - gone < 600, "the replacement was not folded in"
        time.sleep(2)
    release_the_pace(env, "laptop")  # ...so every node of the job's last attempt is released here
    tail = cli(env, "logs", job_id, "-f", "--tail", "5", timeout=600).stdout
    assert "job completed" in tail
    log = cli(env, "logs", job_id).stdout
    state = job_state(env, job_id)
    assert state["status"] == "completed" and state["step"] == LAPTOP_STEPS, state
    assert replaced(log), log[-3000:]
    (notice,) = [line for line in log.splitlines() if line.startswith("recovered (notice)")]
    assert ", 0 steps lost" in notice  # the notice's checkpoint was flushed at the step it came
    assert state["lost_steps"] <= EVERY  # the crash cost at most one checkpoint interval
    out = Path(env["DEEPVM_HOME"]) / "fetched"
    cli(env, "fetch", job_id, "--out", str(out))
    assert (out / "model.pt").stat().st_size > 0
    assert json.loads((out / "metrics.json").read_text())["steps"] == LAPTOP_STEPS
    assert_each_node_pinned_to_its_own_key(env)
    assert_no_user_credentials(env)


def test_detached_job_cancelled_after_a_checkpoint_and_down_guards_it(cluster):
    env, jobs = cluster
    job = write_job(jobs, 400, "cancel", paced=True)  # 200 s at its pace: it is cancelled long before
    started = time.monotonic()
    detached = cli(env, "train", str(job), "--cluster", "mg", "--detach", timeout=240)
    assert time.monotonic() - started < 120  # returns once the job runs, not when it ends
    assert local_deepvm(env) == []  # nothing of the job runs on the user's side
    job_id = newest_job(env)
    follow_hint = re.search(r"follow it: (deepvm logs \S+ -f)", detached.stderr)
    stop_hint = re.search(r"stop it: +(deepvm cancel \S+)", detached.stderr)
    assert follow_hint and stop_hint, detached.stderr
    assert job_state(env, job_id)["controller_alive"]
    wait_for(env, job_id, 8)
    refused = run_cli("down", "mg", "--yes", env=env, timeout=120)
    assert refused.returncode != 0 and "running job" in refused.stderr and "--cancel-jobs" in refused.stderr
    cancel_hint = re.search(r"`(deepvm cancel [^`]+)`", refused.stderr)
    assert cancel_hint and cancel_hint[1] == stop_hint[1] == f"deepvm cancel {job_id}", refused.stderr
    cli(env, *shlex.split(cancel_hint[1])[1:])  # the hints, run as printed
    state = job_state(env, job_id)
    assert state["status"] == "cancelled" and not state["controller_alive"], state
    followed = cli(env, *shlex.split(follow_hint[1])[1:], timeout=120).stdout  # the job is over: -f ends
    assert "cancel requested (checkpoint)" in followed
    log = cli(env, "logs", job_id).stdout
    assert "cancel requested (checkpoint)" in log
    stopped = re.search(r"^job cancelled: cancelled at step (\d+) \(checkpoint at step (\d+)\)$", log, re.MULTILINE)
    assert stopped and stopped[1] == stopped[2] and int(stopped[1]) >= 8, log[-2000:]  # checkpointed where it stopped
    deadline = time.monotonic() + 30
    while job_processes(env) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert job_processes(env) == {}


@pytest.mark.timeout(420)
def test_a_job_that_does_not_step_ends_at_idle_with_its_summary_and_the_hook_told(cluster):
    """--idle on the head (issue 25): a job whose script never steps (paced far beyond the limit, its release
    file never made) ends as failed after --idle; its supervisor's end writes the run's summary, the --notify-cmd
    hook on the head hears the failure, and the job's log says once what the cluster still bills."""
    env, jobs = cluster
    path = write_job(jobs, 40, "idle", paced=True)
    path.write_text(path.read_text().replace(f'["{PACE_S}",', '["600",'))  # never released (idle.release)
    hook = "deepvm-hook.jsonl"  # in the login user's home on the head
    cli(
        env,
        "train",
        str(path),
        "--cluster",
        "mg",
        "--detach",
        "--idle",
        "0.3",
        "--notify-cmd",
        f'{{ cat; echo; }} >> "$HOME/{hook}"',
        "--json",
    )
    job_id = newest_job(env)
    state = wait_for(env, job_id, step=10**9, timeout_s=240)  # until it is over
    assert state["status"] == "failed" and state["message"].endswith("(--idle)"), state
    deadline = time.monotonic() + 60  # the supervisor's end runs once the controller has exited
    while "failure" not in (sent := run_on_head(env, f'cat "$HOME/{hook}" 2>/dev/null || true')):
        assert time.monotonic() < deadline, sent
        time.sleep(2)
    events = [json.loads(line) for line in sent.splitlines() if line.strip()]
    assert [e["event"] for e in events] == ["failure"] and events[0]["job_id"] == job_id
    assert events[0]["summary"]["status"] == "failed"
    summary = json.loads(cli(env, "status", job_id, "--json").stdout)
    assert (summary["status"], summary["cluster_down"]) == ("failed", "") and summary["billing_usd_per_hour"] > 0
    log = cli(env, "logs", job_id).stdout
    assert log.count("still bills") == 1, log[-2000:]


def test_zz_a_head_that_died_is_noticed_by_the_next_command_which_tears_down_the_rest(cluster):
    """Issue 25, point 7, as the module's end (instead of `down`): on a cluster whose head was to take it down
    (`up --autodown`), the head's instance is terminated behind deepvm's back, through the sandbox's EC2, while a
    job trains, and its host ends as the sandbox ends a terminated instance's; the next command here notices,
    tears the rest down (the trainers, template, security group, key pair, roles) and says what was lost: the
    job, recorded failed; nothing of the cluster runs."""
    env, jobs = cluster
    plan = Path(env["DEEPVM_HOME"]).parent / "plan.json"
    cli(env, "up", "--plan", str(plan), "--name", "mg", "--cloud", "sandbox", "--yes", "--autodown", "600", timeout=180)
    with detached(env, write_job(jobs, 400, "orphan", paced=True)) as job_id:
        wait_for(env, job_id, 1)
    nodes = json.loads(cli(env, "status", "mg", "--json").stdout)["nodes"]
    (head,) = [n["instance_id"] for n in nodes if n["role"] == "holder" and n["state"] == "running"]
    sandbox_client(env, "ec2").terminate_instances(InstanceIds=[head])
    deadline = time.monotonic() + 30
    while procs.host_namespaces(head):  # the sandbox's supervisor kills a terminated instance's host
        assert time.monotonic() < deadline, "the terminated head's host still runs"
        time.sleep(0.5)
    said = " ".join(cli(env, "status").stderr.split())
    assert (
        f"cluster mg's head is gone and left no record: its head {head} is not running, so the job's "
        "controller, its log and the outputs and checkpoints on its disk that were not copied to S3 are lost; "
        "tore down the rest:"
    ) in said, said
    assert f"job {job_id} was running on it (step " in said and "it failed with its head" in said, said
    assert "cluster mg" not in " ".join(cli(env, "status").stderr.split())  # said once, by the command that did it
    deadline = time.monotonic() + 30
    while node_processes(env) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert node_processes(env) == {}
    ended = json.loads(cli(env, "status", "mg", "--json").stdout)
    (lost,) = [j for j in ended["jobs"] if j["job_id"] == job_id]  # as recorded here: mg is down
    assert (ended["status"], lost["status"]) == ("terminated", "failed"), lost
