"""`deepvm train` end to end in the sandbox: a Tiering cluster (3 spot trainers + 1 on-demand holder),
real sshd hosts, real mpirun over SSH from the head node (the holder), real DDP training and real
DeepCheck files.

One cluster serves the module (its own DEEPVM_HOME); the last test tears it down and checks that no
process of it is left. CI runs what only a real cluster shows: an attached run of deepvm's worker through a
Spot notice; the other recoveries (a user's own script through a notice, a node lost without notice, a hang,
the holder lost with L3, Ctrl-C and resume, a controller killed) run in CI in-process against the real
Controller (tests/training/test_controller.py) or under real mpirun, and here with `-m soak`.

Interruptions are the sandbox's: `deepvm interrupt` posts the notice to the node's instance metadata and
the supervisor terminates the instance at the deadline; a node that dies without notice is terminated
through the EC2 API, which kills every process of its host.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from itertools import pairwise
from pathlib import Path
from statistics import mean

import pytest
import torch

from provisioning.cloud.keys import ensure_cluster_keys
from tests.cloud.managed_rig import release_the_pace
from tests.cloud.plans import AZ, make_tiering_plan
from tests.cloud.procs import host_namespaces, pid_namespace, processes
from tests.conftest import REPO, main_in_process, run_cli
from tests.training.framework_scripts import HF_SCRIPT, LIGHTNING_SCRIPT, TORCHRUN_SCRIPT
from training.node.models import build_model

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox boots namespaced sshd hosts and needs root"),
]

EVERY = 5  # checkpoint interval, steps
STEPS = 200  # a notice posted at step 3 lands mid-run, even loaded (at step 42-58 on a quiet machine; 120 steps
# were not enough once in a full run, where the test read "step 3" late: the job's lines wait in the pipe)
NAME = f"e2e-{uuid.uuid4().hex[:8]}"  # in every rank's command line: tells our processes from others'
JOB = f"""\
name: {NAME}
seed: 0
model: {{name: resnet18, num_classes: 10, width: 16}}
dataset: {{kind: synthetic, samples: 1024, image_shape: [3, 8, 8], classes: 10, seed: 0}}
steps: {STEPS}
batch_size: 8
log_every: 1
optimizer: {{name: sgd, lr: 0.02, momentum: 0.9, weight_decay: 5.0e-4}}
schedule: {{name: cosine, warmup_steps: 5}}
checkpoint: {{every_steps: {EVERY}, levels: [l1, l2], buffer_slots: 2}}
shrink: {{keep_global_batch_by: per_trainer_batch}}
env: {{OMP_NUM_THREADS: "1"}}
"""
_STEP = re.compile(r"^step (\d+)/\d+ ")
_REMINDER = re.compile(
    r"^cluster e2e is still up \(\$\d+\.\d{4}/h at AWS prices; the sandbox bills nothing\): "
    r"`deepvm down e2e` stops it$"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(env with the module's DEEPVM_HOME, job path); down and sandbox stop afterwards."""
    root = tmp_path_factory.mktemp("train-e2e")
    env = {"DEEPVM_HOME": str(root / "home")}
    (root / "plan.json").write_text(json.dumps(make_tiering_plan().to_dict()))
    job = root / "job" / "e2e.yaml"
    job.parent.mkdir()
    job.write_text(JOB)
    result = run_cli("up", "--yes", "--plan", str(root / "plan.json"), "--name", "e2e", "--json", env=env, timeout=180)
    assert result.returncode == 0, result.stderr
    try:
        yield env, job
    finally:
        run_cli("down", "e2e", "--yes", env=env, timeout=180)
        run_cli("sandbox", "stop", env=env, timeout=120)


def start_train(env: dict[str, str], job: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deepvm_cli",
            "train",
            str(job),
            "--cluster",
            "e2e",
            "--json",
            "--controller",
            "local",
            *args,
        ],
        cwd=REPO,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_until_step(proc: subprocess.Popen, step: int, seen: list[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line.rstrip("\n"))
        match = _STEP.match(line)
        if match and int(match[1]) >= step:
            return
    raise AssertionError("training ended before step {step}:\n" + "\n".join(seen[-30:]))


def read_until_line(proc: subprocess.Popen, text: str, seen: list[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line.rstrip("\n"))
        if text in line:
            return
    raise AssertionError(f"training ended before {text!r}:\n" + "\n".join(seen[-30:]))


def finish(proc: subprocess.Popen, seen: list[str]) -> dict:
    stdout, stderr = proc.communicate(timeout=600)
    seen += stderr.splitlines()
    assert proc.returncode == 0, "\n".join(seen[-40:])
    return json.loads(stdout)


def steps_seen(lines: list[str]) -> list[int]:
    return [int(m[1]) for m in map(_STEP.match, lines) if m]


def last_losses(result: dict, count: int = 10) -> float:
    curve = json.loads((Path(result["out_dir"]) / "metrics.json").read_text())["loss_curve"]
    return mean(loss for _, loss in curve[-count:])


def trainers_in_job(env: dict[str, str], seen: list[str]) -> list[str]:
    """Spot trainers of the running attempt (its note names them trainer-<instance id prefix>)."""
    attempt = next(line for line in reversed(seen) if line.startswith("attempt "))
    names = re.findall(r"trainer-([0-9a-f]{8})", attempt)
    status = cluster_status(env)
    return [n["instance_id"] for n in status["nodes"] if n["market"] == "spot" and n["instance_id"][2:10] in names]


def assert_steps_never_go_back_more_than(steps: list[int], most: int) -> None:
    for before, after in pairwise(steps):
        assert after >= before - most, f"step went back from {before} to {after}: {steps}"


@pytest.mark.soak  # about 2 minutes of both cores: CI's suite stays under 12 min; run it with `-m soak`
def test_profile_measures_one_two_three_trainers_and_plan_reads_it(cluster, tmp_path):
    """First, on the whole cluster: `deepvm profile` launches configs/resnet.yaml on 1, 2 and 3 of its
    trainers (the holder with them each time), writes the profile and its plot, leaves nothing running;
    `deepvm plan --profile` plans g4dn.xlarge with it (the sandbox's speeds say nothing of GPUs)."""
    env, _ = cluster
    out, picture = tmp_path / "profile.json", tmp_path / "profile.png"
    result = run_cli(
        "profile",
        "configs/resnet.yaml",
        "--cluster",
        "e2e",
        "--steps",
        "8",
        "--warmup",
        "2",
        "--repeats",
        "1",
        "--out",
        str(out),
        "--plot",
        str(picture),
        env=env,
        timeout=900,
    )
    print(result.stdout, result.stderr)  # the README's example (pytest -s)
    assert result.returncode == 0, result.stderr[-4000:]
    profile = json.loads(out.read_text())
    assert (profile["instance_type"], profile["cluster"], profile["job"]["name"]) == (
        "g4dn.xlarge",
        "e2e",
        "resnet18-rehearsal",
    )
    assert [(s["nodes"], len(s["samples_per_s"])) for s in profile["sizes"]] == [(1, 1), (2, 1), (3, 1)]
    assert all(s["samples_per_s"][0] > 0 for s in profile["sizes"]) and profile["sizes"][0]["speedup"] == 1.0
    assert (profile["steps"], profile["warmup_steps"], profile["repeats"]) == (8, 2, 1)
    assert profile["fit"]["max_nodes_measured"] == 3 and profile["fit"]["a"]["value"] > 0
    assert picture.read_bytes().startswith(b"\x89PNG")
    assert "cost: the cluster bills $" in result.stderr and "estimate: about" in result.stderr
    assert "speed-up" in result.stdout and "S(n) = c / (1 + exp(-a (n - b))): a = " in result.stdout
    assert not [line for line in processes().values() if ".deepvm-profile.yaml" in line]
    hosts = Path(env["DEEPVM_HOME"], "sandbox", "hosts")
    assert list(hosts.glob("*/home/*/deepvm/runtime")) and not list(hosts.glob("*/home/*/deepvm/jobs/*-profile-*"))
    plan = run_cli("plan", "--offline", "--max-price", "12", "--profile", str(out), "--json", env=env)
    assert plan.returncode == 0, plan.stderr
    curves = {c["instance_type"]: c for c in json.loads(plan.stdout)["scaling_curves"]}
    assert (curves["g4dn.xlarge"]["source"], curves["g4dn.xlarge"]["max_nodes"]) == ("profile", 4)


def test_spot_notice_mid_run_loses_no_step_and_matches_an_uninterrupted_run(cluster, monkeypatch):
    env, job = cluster
    monkeypatch.setenv("DEEPVM_HOME", env["DEEPVM_HOME"])
    reference_lines: list[str] = []
    proc = start_train(env, job)
    read_until_step(proc, 3, reference_lines)
    head = on_demand_node(env)  # mpirun and its supervisor run there, not on this machine
    for command in ("mpirun ", "-m training.head.mpirun_guard "):
        pids = [pid for pid, line in _our_processes(env).items() if command in f" {line}"]
        assert pids and {pid_namespace(pid) for pid in pids} == host_namespaces(head), command
    reference = finish(proc, reference_lines)
    assert (reference["status"], reference["steps"], reference["restarts"]) == ("completed", STEPS, 0), "\n".join(
        line for line in reference_lines if not _STEP.match(line)
    )
    assert reference["synthetic"] is True
    build_model("resnet18", 10, width=16).load_state_dict(torch.load(Path(reference["out_dir"]) / "model.pt"))
    assert _REMINDER.match(reference_lines[-1]), reference_lines[-1]  # the job is over, the cluster is not

    # the victim, a Spot trainer of the cluster (the job trains on all three: world_before below), is chosen before
    # the job starts, so that its notice is posted at step 3 at once: a status call on a loaded machine took
    # long enough there for the job to end before the notice (seen once in a full run)
    victim = sorted(n["instance_id"] for n in cluster_status(env)["nodes"] if n["market"] == "spot")[1]
    seen: list[str] = []
    proc = start_train(env, job)
    read_until_step(proc, 3, seen)
    try:
        result = main_in_process("interrupt", victim, "--after", "30", env=env)
        assert result.returncode == 0, result.stderr
        run = finish(proc, seen)

        assert (run["status"], run["steps"]) == ("completed", STEPS)
        notice = next((r for r in run["recoveries"] if r["reason"] == "notice"), None)
        assert notice is not None, (run["recoveries"], [line for line in seen if not _STEP.match(line)][-40:])
        assert notice["nodes"][0] == victim and notice["lost_steps"] == 0
        assert notice["resumed_step"] == notice["from_step"] >= 3 and notice["world_before"] == 3
        assert notice["detect_to_checkpoint_s"] < 10 and notice["detect_to_resumed_s"] < 120
        assert run["lost_steps"] == 0 and run["restarts"] >= 1
        assert all(victim not in a["nodes"] for a in run["attempts"][1:])
        steps = steps_seen(seen)
        assert steps == sorted(steps) and steps[-1] == STEPS  # the notice was honoured: never back
        for before, after in pairwise(run["attempts"]):
            assert after["first_step"] == before["last_step"]
        assert any("Spot interruption notice on" in line for line in seen)

        # same seed, same global batch and sample order: the curves end in the same place
        assert abs(last_losses(run) - last_losses(reference)) < 0.25

        status = cluster_status(env)
        job_row = next(j for j in status["jobs"] if j["job_id"] == run["job_id"])
        assert (job_row["state"], job_row["step"], job_row["lost_steps"]) == ("completed", STEPS, 0)
        assert job_row["restarts"] == run["restarts"] and job_row["cost_usd"] > 0
        assert_the_head_alone_holds_the_internal_key(env, run["attempts"][-1]["nodes"], head)  # a replacement too
    finally:
        wait_until_gone(env, victim)


def finish_through_a_notice(env: dict[str, str], proc: subprocess.Popen, victim: str, seen: list[str]) -> dict:
    """The run's result once a notice to `victim` (30 s ahead) was posted now and the run ended; the victim gone."""
    try:
        result = main_in_process("interrupt", victim, "--after", "30", env=env)
        assert result.returncode == 0, result.stderr
        return finish(proc, seen)
    finally:
        wait_until_gone(env, victim)


def wait_until_gone(env: dict[str, str], victim: str) -> None:
    """The sandbox terminates a noticed node at the notice's deadline: the next test must not find it dying
    (its pending notice would make that test's launch leave it out and buy a replacement)."""
    deadline = time.monotonic() + 90
    while victim in running_nodes(env) and time.monotonic() < deadline:
        time.sleep(1)
    assert victim not in running_nodes(env)


def assert_the_head_alone_holds_the_internal_key(env: dict[str, str], nodes: list[str], head: str) -> None:
    """The internal private key is on the head only, the user's login key on no node, and every node
    accepts the internal key."""
    keys = ensure_cluster_keys("e2e")
    login, internal = _key_material(keys.login_key_path), _key_material(keys.internal_key_path)
    holding: dict[str, set[tuple[str, str]]] = {"login": set(), "internal": set()}
    for instance_id in nodes:
        home = Path(env["DEEPVM_HOME"]) / "sandbox" / "hosts" / instance_id / "home"
        for path in (p for p in home.rglob("*") if p.is_file() and p.stat().st_size < 1 << 20):
            data = path.read_bytes()
            for name, material in (("login", login), ("internal", internal)):
                if material in data:
                    holding[name].add((instance_id, str(path.relative_to(home))))
        authorized = (home / "root" / ".ssh" / "authorized_keys").read_text().splitlines()
        assert sorted(authorized) == sorted([keys.login_public, keys.internal_public]), instance_id
    assert holding == {"login": set(), "internal": {(head, "root/deepvm/ssh/id_ed25519")}}


@pytest.mark.soak  # in CI, in-process: test_controller.py's
# test_a_node_lost_without_notice_is_retired_and_the_job_resumes_from_the_newest_checkpoint
def test_node_dying_without_notice_restarts_from_the_newest_checkpoint(cluster, monkeypatch):
    env, job = cluster
    monkeypatch.setenv("DEEPVM_HOME", env["DEEPVM_HOME"])
    from provisioning.sandbox.control import load_info

    seen: list[str] = []
    proc = start_train(env, job)
    read_until_step(proc, 9, seen)
    victim = trainers_in_job(env, seen)[0]
    load_info().context(AZ[:-1]).client("ec2").terminate_instances(InstanceIds=[victim])
    run = finish(proc, seen)

    assert (run["status"], run["steps"]) == ("completed", STEPS)
    lost = next(r for r in run["recoveries"] if r["reason"] == "node-lost")
    assert victim in lost["nodes"] and 0 <= lost["lost_steps"] <= EVERY
    assert lost["resumed_step"] % EVERY == 0 and lost["resumed_step"] >= lost["from_step"] - EVERY
    assert_steps_never_go_back_more_than(steps_seen(seen), EVERY)
    assert any(a["status"] == "failed" for a in run["attempts"])


@pytest.mark.soak  # in CI, in-process: test_controller.py's
# test_a_node_that_hangs_is_noticed_by_the_stall_watch_killed_retired_and_replaced
def test_node_that_hangs_is_noticed_terminated_and_replaced(cluster, monkeypatch):
    """A frozen node keeps its sockets open, so nothing fails: the other trainers wait in the next allreduce.
    The controller sees the silence, stops the job, finds the node that does not answer, terminates it
    through EC2 (it would bill until `down`) and continues from the newest checkpoint."""
    env, job = cluster
    monkeypatch.setenv("DEEPVM_HOME", env["DEEPVM_HOME"])
    from provisioning.sandbox.control import load_info

    seen: list[str] = []
    proc = start_train(env, job, "--stall-timeout", "15")
    read_until_step(proc, 9, seen)
    victim = trainers_in_job(env, seen)[0]
    freeze_host(victim)
    run = finish(proc, seen)

    assert (run["status"], run["steps"]) == ("completed", STEPS)
    stall = next(r for r in run["recoveries"] if r["reason"] == "stall")
    assert victim in stall["nodes"] and 0 <= stall["lost_steps"] <= EVERY
    assert_steps_never_go_back_more_than(steps_seen(seen), EVERY)
    assert all(victim not in a["nodes"] for a in run["attempts"][1:])
    ec2 = load_info().context(AZ[:-1]).client("ec2")
    (instance,) = ec2.describe_instances(InstanceIds=[victim])["Reservations"][0]["Instances"]
    assert instance["State"]["Name"] in ("shutting-down", "terminated")
    status = cluster_status(env)
    assert next(n for n in status["nodes"] if n["instance_id"] == victim)["state"] != "running"


@pytest.mark.soak  # in CI, in-process: test_controller.py's
# test_losing_the_only_holder_with_l3_waits_for_a_new_holder_and_resumes_from_s3
def test_losing_the_holder_continues_from_s3_on_a_replacement_holder(cluster, monkeypatch, tmp_path):
    """Checkpoints live on the holder; with level l3 they are in S3 too, so when the holder dies the
    controller buys a new on-demand holder and the job continues from the newest checkpoint in S3."""
    env, _ = cluster
    monkeypatch.setenv("DEEPVM_HOME", env["DEEPVM_HOME"])
    from provisioning.sandbox.control import load_info

    clients = load_info().context(AZ[:-1])
    clients.client("s3").create_bucket(Bucket="e2e-checkpoints")
    l3_job = tmp_path / "job" / "l3.yaml"
    l3_job.parent.mkdir()
    l3_job.write_text(JOB.replace("levels: [l1, l2]", "levels: [l1, l2, l3], s3_prefix: s3://e2e-checkpoints/run"))
    seen: list[str] = []
    proc = start_train(env, l3_job)
    read_until_step(proc, 12, seen)
    status = cluster_status(env)
    (holder,) = [n["instance_id"] for n in status["nodes"] if n["role"] == "holder" and n["state"] == "running"]
    clients.client("ec2").terminate_instances(InstanceIds=[holder])
    run = finish(proc, seen)

    assert (run["status"], run["steps"]) == ("completed", STEPS)
    lost = next(r for r in run["recoveries"] if holder in r["nodes"])
    assert lost["resumed_step"] >= EVERY and lost["resumed_step"] % EVERY == 0  # from S3, not from scratch
    assert any(line.startswith("restored step") and " from L3 in " in line for line in seen)  # S3 only
    holders = [n for n in cluster_status(env)["nodes"] if n["role"] == "holder" and n["state"] == "running"]
    assert len(holders) == 1 and holders[0]["instance_id"] != holder
    listed = clients.client("s3").list_objects_v2(Bucket="e2e-checkpoints", Prefix="run/")
    assert any(o["Key"].endswith("manifest.json") for o in listed.get("Contents", []))


def freeze_host(instance_id: str) -> None:
    """SIGSTOP every process of a sandbox host (sshd, Open MPI's daemon, the ranks): a machine that hangs."""
    from provisioning.sandbox.hosts import host_processes
    from provisioning.sandbox.procs import children

    todo, frozen = host_processes(instance_id), []
    assert todo, f"{instance_id} has no sandbox host"
    while todo:
        pid = todo.pop()
        os.kill(pid, signal.SIGSTOP)
        frozen.append(pid)
        todo += [c for c in children(pid) if c not in frozen]


OWN_STEPS = 400
# the shipped example script held to 0.5 s a step (tests/cloud/paced_train.py) until the test has seen the
# notice arrive: it lands before the end however fast or loaded the machine, and the rest trains at full speed
OWN_JOB = f"""\
name: {NAME}-own
steps: {OWN_STEPS}
log_every: 10
checkpoint: {{every_steps: 50, levels: [l1, l2]}}
run: {{script: paced_train.py, args: ["0.5", own.release, --batch-size, "8"]}}
env: {{OMP_NUM_THREADS: "1"}}
"""


@pytest.mark.soak  # 75-110 s of both cores; in CI: a user's script through a notice under real mpirun
# (tests/training/test_userscript_mpi.py), the controller's notice path in-process, the notice on real hosts above
def test_own_script_survives_a_spot_notice_and_its_output_comes_back(cluster):
    env, job = cluster
    own = job.parent.parent / "own" / "own.yaml"  # the shipped example's script, beside a job file of ours
    own.parent.mkdir()
    shutil.copy(REPO / "configs" / "own_train.py", own.parent)
    shutil.copy(Path(__file__).with_name("paced_train.py"), own.parent)
    own.write_text(OWN_JOB)
    seen: list[str] = []
    proc = start_train(env, own)
    read_until_step(proc, 10, seen)
    victim = trainers_in_job(env, seen)[1]
    try:
        result = run_cli("interrupt", victim, "--after", "30", env=env)
        assert result.returncode == 0, result.stderr
        read_until_line(proc, "Spot interruption notice on", seen)
        release_the_pace(env, "own")
        run = finish(proc, seen)
    finally:
        wait_until_gone(env, victim)

    assert (run["status"], run["steps"], run["total_steps"]) == ("completed", OWN_STEPS, OWN_STEPS)
    assert run["synthetic"] is False  # whatever the script trains on, deepvm does not label it
    notices = [r for r in run["recoveries"] if r["reason"] == "notice"]
    assert notices, (run["recoveries"], [line for line in seen if not _STEP.match(line)][-40:])
    assert notices[0]["nodes"][0] == victim and notices[0]["resumed_step"] == notices[0]["from_step"] >= 10
    assert run["lost_steps"] == 0 and all(r["lost_steps"] == 0 for r in run["recoveries"])
    steps = steps_seen(seen)
    assert steps == sorted(steps) and steps[-1] == OWN_STEPS
    for before, after in pairwise(run["attempts"]):
        assert after["first_step"] == before["last_step"]

    out = Path(run["out_dir"])  # rank 0's ctx.out: the script's own model.pt beside deepvm's metrics.json
    assert torch.load(out / "model.pt")["head.weight"].shape == (10, 32)
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["status"], metrics["steps"], metrics["script"]) == ("completed", OWN_STEPS, "paced_train.py")
    status = cluster_status(env)
    job_row = next(j for j in status["jobs"] if j["job_id"] == run["job_id"])
    assert (job_row["state"], job_row["step"], job_row["lost_steps"]) == ("completed", OWN_STEPS, 0)


TORCHRUN_EPOCHS = 60
TORCHRUN_JOB = f"""\
name: {NAME}-torchrun
run: {{script: multinode.py, calls_step: false}}
checkpoint: {{files: [snapshot.pt], levels: [l2]}}
env: {{OMP_NUM_THREADS: "1"}}
"""
_RESUMED = re.compile(r"trainer-([0-9a-f]{8}) r\d+\S* RESUMED (\d+) (\d+) (\d+)$")
_EPOCH = re.compile(r"EPOCH 0 (\d+)$")


def test_an_unchanged_torchrun_script_survives_a_notice_to_rank_0s_node(cluster):
    """Issue 36: rank 0 saved `snapshot.pt` on its own node; after a notice there every other rank started from
    epoch 0 and the job failed. deepvm keeps the file as it is closed, flushes it at the notice and puts it back on
    every trainer of the relaunch, which resumes at one epoch on every rank. Its `levels: [l2]` are written exactly
    (issue 38): the flush is safe at L2, the files come back from the holder's disk, never from its RAM."""
    env, job = cluster
    own = job.parent.parent / "torchrun" / "job.yaml"
    own.parent.mkdir()
    (own.parent / "multinode.py").write_text(TORCHRUN_SCRIPT.format(epochs=TORCHRUN_EPOCHS, pause_s=0.25))
    own.write_text(TORCHRUN_JOB)
    seen: list[str] = []
    proc = start_train(env, own)
    read_until_line(proc, "EPOCH 0 4", seen)
    (rank_0,) = {m[1] for m in map(_RESUMED.search, seen) if m and m[2] == "0"}
    victim = next(n["instance_id"] for n in cluster_status(env)["nodes"] if n["instance_id"][2:10] == rank_0)
    run = finish_through_a_notice(env, proc, victim, seen)

    said = "\n".join(line for line in seen if "EPOCH" not in line)
    assert run["status"] == "completed", said[-4000:]
    launches = [(int(m[2]), int(m[3]), int(m[4])) for m in map(_RESUMED.search, seen) if m]
    first, *relaunched = sorted({count for _, _, count in launches})
    assert first == 0 and relaunched, said[-4000:]
    resumed_at = {epoch for _, epoch, count in launches if count == relaunched[0]}
    relaunch = next(i for i, m in enumerate(map(_RESUMED.search, seen)) if m and int(m[4]) == relaunched[0])
    stopped_at = max(int(m[1]) for m in map(_EPOCH.search, seen[:relaunch]) if m)
    assert len(resumed_at) == 1 and 4 < resumed_at.pop() <= stopped_at + 1, said[-4000:]  # every rank, one epoch
    assert any(m[1] == str(TORCHRUN_EPOCHS - 1) for m in map(_EPOCH.search, seen) if m)
    notice = next((r for r in run["recoveries"] if r["reason"] == "notice"), None)
    assert notice is not None and notice["nodes"][0] == victim, (run["recoveries"], said[-3000:])
    assert any(" safe at L2 in " in line for line in seen) and not any(" at L1 " in line for line in seen), said
    assert any(line.startswith("put back 1 kept file") and " from L2 in " in line for line in seen), said
    (holder,) = [
        n["instance_id"] for n in cluster_status(env)["nodes"] if n["role"] == "holder" and n["state"] == "running"
    ]
    home = Path(env["DEEPVM_HOME"]) / "sandbox" / "hosts" / holder / "home"
    assert any("checkpoints" in p.parts for p in home.rglob("manifest.json")), "no L2 checkpoint on the holder"


@pytest.mark.soak  # 5.5 minutes of waiting; in CI: the stall watch's rules in-process (tests/training/test_stall.py)
@pytest.mark.timeout(600)
def test_a_script_that_never_calls_step_runs_past_five_minutes(cluster):
    """Issue 36 finding 1: every unchanged script was killed as hung when the 300 s start-up grace ran out."""
    env, job = cluster
    own = job.parent.parent / "long" / "job.yaml"
    own.parent.mkdir()
    (own.parent / "long.py").write_text(
        "import time\nfor i in range(11):\n    print(f'waited {i * 30}s', flush=True)\n    time.sleep(30)\n"
    )
    own.write_text(f"name: {NAME}-long\nrun: {{script: long.py, calls_step: false}}\nenv: {{OMP_NUM_THREADS: '1'}}\n")
    seen: list[str] = []
    run = finish(start_train(env, own), seen)
    assert run["status"] == "completed" and run["restarts"] == 0 and run["wall_s"] > 300, "\n".join(seen[-30:])
    assert any(line.endswith("waited 300s") for line in seen)


@pytest.mark.soak  # 60-90 s each; in CI: the same scripts through a notice under real mpirun
# (tests/training/test_hf_adapter.py, test_lightning_adapter.py), the unchanged script's notice on real hosts above
@pytest.mark.parametrize("framework", ["hf", "lightning"])
def test_a_framework_script_with_its_one_line_adapter_loses_no_step_to_a_notice(cluster, framework):
    """Issue 36: an HF Trainer script lost all its progress to a notice ("Can't find a valid checkpoint"), a
    Lightning one hung. With DeepVMCallback the framework saves its own checkpoint at the stop, deepvm keeps it,
    and every rank of the relaunch resumes at that very step."""
    env, job = cluster
    script, text, begin, kept = {
        "hf": ("train_hf.py", HF_SCRIPT, "BEGIN", "output"),
        "lightning": ("train.py", LIGHTNING_SCRIPT, "RESUMED", "checkpoints"),
    }[framework]
    own = job.parent.parent / framework / "job.yaml"
    own.parent.mkdir()
    (own.parent / script).write_text(text)
    own.write_text(
        f"name: {NAME}-{framework}\nrun: {{script: {script}, calls_step: false}}\nlog_every: 5\n"
        f"checkpoint: {{files: [{kept}], levels: [l1, l2]}}\nenv: {{OMP_NUM_THREADS: '1'}}\n"
    )
    seen: list[str] = []
    proc = start_train(env, own)
    read_until_step(proc, 10, seen)
    victim = trainers_in_job(env, seen)[0]
    run = finish_through_a_notice(env, proc, victim, seen)

    said = "\n".join(line for line in seen if not _STEP.match(line))
    assert run["status"] == "completed", said[-4000:]
    done = [int(m[1]) for m in (re.search(r" DONE \d+ (\d+)$", line) for line in seen) if m]
    begun = [int(m[1]) for m in (re.search(rf" {begin} \d+ (\d+)\b", line) for line in seen) if m]
    stopped_at = done[0]  # the first attempt's train()/fit() returned at the stop, on every rank
    assert stopped_at >= 10 and stopped_at in begun[len(begun) // 2 :], said[-4000:]  # the relaunch began there
    notice = next(r for r in run["recoveries"] if r["reason"] == "notice")
    assert (notice["lost_steps"], notice["resumed_step"], notice["from_step"]) == (0, stopped_at, stopped_at), said


@pytest.mark.soak  # in CI, in-process: test_controller.py's
# test_ctrl_c_stops_cleanly_and_the_printed_command_resumes_without_a_restart
def test_ctrl_c_stops_as_asked_and_the_printed_hint_resumes_without_a_restart(cluster):
    """Ctrl-C is the user's own stop: no `error:`, and the command it prints continues the job as is."""
    env, job = cluster
    seen: list[str] = []
    proc = start_train(env, job)
    read_until_step(proc, 8, seen)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=300)
    reminder, last = stderr.strip().splitlines()[-2:]
    assert proc.returncode == 130, "\n".join((seen + stderr.splitlines())[-30:])
    assert last.startswith("deepvm: stopped at step") and "error" not in last, last
    assert _REMINDER.match(reminder), reminder
    hint = re.search(r"`(deepvm train [^`]+)`", last)
    assert hint, last
    argv = shlex.split(hint[1])
    assert argv[argv.index("--cluster") + 1] == "e2e" and "--resume" in argv
    resumed = subprocess.run(
        [sys.executable, "-m", "deepvm_cli", *argv[1:], "--json"],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _REMINDER.match(resumed.stderr.strip().splitlines()[-1]), resumed.stderr[-3000:]  # completed, still up
    result = json.loads(resumed.stdout)
    assert result["steps"] == STEPS and result["restarts"] == 0, result
    assert result["recoveries"][0]["reason"] == "user-resume"


@pytest.mark.soak
def test_controller_killed_then_resumed(cluster):
    env, job = cluster
    seen: list[str] = []
    proc = start_train(env, job)
    read_until_step(proc, 12, seen)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60  # its connection closed: mpirun_guard stops mpirun, and the ranks with it
    while (jobs := [c for c in _our_processes(env).values() if "mpirun" in c or "training.node.rank" in c]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.5)
    assert not jobs  # mpirun died with its controller, and the ranks with it
    status = cluster_status(env)
    assert status["jobs"][0]["state"].startswith("interrupted")
    resumed = finish(start_train(env, job, "--resume"), seen)
    (restart,) = [r for r in resumed["recoveries"] if r["reason"] == "controller-restart"]
    assert resumed["steps"] == STEPS and restart["lost_steps"] <= EVERY


def cluster_status(env: dict[str, str]) -> dict:
    """`deepvm status e2e --json`, in this process (tests/conftest.py main_in_process): the scenarios ask it
    every second while they wait, and a process each would import deepvm every time."""
    result = main_in_process("status", "e2e", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _our_processes(env: dict[str, str]) -> dict[int, str]:
    """Command lines of live processes that belong to this module's cluster or its jobs, by pid."""
    return {pid: line for pid, line in processes().items() if env["DEEPVM_HOME"] in line or NAME in line}


def running_nodes(env: dict[str, str]) -> list[str]:
    status = cluster_status(env)
    return [n["instance_id"] for n in status["nodes"] if n["state"] == "running"]


def on_demand_node(env: dict[str, str]) -> str:
    status = cluster_status(env)
    (holder,) = [n["instance_id"] for n in status["nodes"] if n["market"] == "on-demand"]
    return holder


def _key_material(private_key: Path) -> bytes:
    """A line of the key's secret part: found in a file only if the key was copied there."""
    return private_key.read_bytes().splitlines()[4]


def test_zz_down_leaves_nothing_running(cluster):
    env, _ = cluster
    down = run_cli("down", "e2e", "--yes", env=env, timeout=180)  # train's reminder's command (no terminal: --yes)
    assert down.returncode == 0, down.stderr
    summary = re.fullmatch(
        r"cluster e2e is down: ran (\d+h\d\dm|\d+m\d\ds), cost \$(\d+\.\d{4}) at AWS prices "
        r"\(the sandbox bills nothing\)",
        down.stderr.strip().splitlines()[-1],
    )
    assert summary and summary[1] != "0m00s" and float(summary[2]) > 0, down.stderr
    assert run_cli("sandbox", "stop", env=env, timeout=120).returncode == 0
    assert _our_processes(env) == {}
