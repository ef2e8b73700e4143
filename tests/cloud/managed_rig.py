"""The managed end-to-end modules' cluster and helpers: a Tiering cluster ("mg") whose on-demand head (the
holder) runs each job's controller under its supervisor, while the user's machine only submits, follows,
cancels and fetches. Real sshd hosts, real mpirun, real training; the "laptop" is the tests' CLI processes.

Each module (test_managed_e2e.py, test_managed_watch_e2e.py) holds one such cluster, so pytest-xdist runs the
two on two workers at once. The user's environment carries canary AWS credentials: the sandbox never uses
them, and no node may ever see them (no file, no environment, no command line).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from provisioning.planner.plan import Plan
from provisioning.sandbox.control import load_info
from tests.cloud import procs
from tests.cloud.plans import REGION, make_tiering_plan
from tests.conftest import REPO, CliResult, deepvm_line, run_cli

SANDBOX_ONLY = [  # each managed module's pytestmark
    pytest.mark.sandbox,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox boots namespaced sshd hosts and needs root"),
]
EVERY = 5  # checkpoint interval, steps
LAPTOP_STEPS = 520  # held at PACE_S a step, 260 s: past its 125 s away and the fold-in; the rest at full speed
PACE_S = 0.5
CANARY = f"canary-secret-{uuid.uuid4().hex}"  # the user's AWS secret, as far as deepvm can tell
NAME = f"mg-{uuid.uuid4().hex[:8]}"


def paced_yaml(steps: int, name: str, release: str) -> str:
    """The shipped example script (configs/own_train.py), each step lasting at least PACE_S seconds until
    the test releases it (paced_train.py, a file named `release`): it outlasts what the test waits for on any
    machine, then ends."""
    return f"""\
name: {name}
seed: 0
steps: {steps}
log_every: 1
checkpoint: {{every_steps: {EVERY}, levels: [l1, l2], buffer_slots: 2}}
run: {{script: paced_train.py, args: ["{PACE_S}", {release}, --batch-size, "8"]}}
env: {{OMP_NUM_THREADS: "1"}}
"""


def job_yaml(steps: int, name: str) -> str:
    return f"""\
name: {name}
seed: 0
model: {{name: resnet18, num_classes: 10}}
dataset: {{kind: synthetic, samples: 512, image_shape: [3, 16, 16], classes: 10, seed: 0}}
steps: {steps}
batch_size: 8
log_every: 1
optimizer: {{name: sgd, lr: 0.02, momentum: 0.9, weight_decay: 5.0e-4}}
checkpoint: {{every_steps: {EVERY}, levels: [l1, l2], buffer_slots: 2}}
shrink: {{keep_global_batch_by: per_trainer_batch}}
env: {{OMP_NUM_THREADS: "1"}}
"""


def module_cluster(tag: str, plan: Plan | None = None):
    """A test module's own cluster "mg" of `plan`, as its module-scoped fixture `cluster` (assign it:
    `cluster = module_cluster("managed-e2e")`): (env, job directory); deleted afterwards, and nothing of it may
    run. By default the Tiering plan, planned under a cap with room for a repair of another type (the ladder's)."""

    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory) -> Iterator[tuple[dict[str, str], Path]]:
        root = tmp_path_factory.mktemp(tag)
        env = {"DEEPVM_HOME": str(root / "home"), "AWS_ACCESS_KEY_ID": "AKIACANARY", "AWS_SECRET_ACCESS_KEY": CANARY}
        chosen = plan
        if chosen is None:
            tiering = make_tiering_plan()
            chosen = replace(tiering, price_cap=tiering.price_per_hour + 1.0)
        (root / "plan.json").write_text(json.dumps(chosen.to_dict()))
        jobs = root / "jobs"
        jobs.mkdir()
        up = run_cli(
            "up",
            "--plan",
            str(root / "plan.json"),
            "--name",
            "mg",
            "--cloud",
            "sandbox",
            "--yes",
            "--json",
            env=env,
            timeout=180,
        )
        assert up.returncode == 0, up.stderr
        try:
            yield env, jobs
        finally:
            run_cli("down", "mg", "--yes", "--cancel-jobs", env=env, timeout=300)
            run_cli("sandbox", "stop", env=env, timeout=120)

    return cluster


def write_job(jobs: Path, steps: int, tag: str, paced: bool = False) -> Path:
    """The ResNet-18 job, or with `paced` the example script at PACE_S a step (its scripts beside it),
    released by a file of its own (`tag`.release)."""
    path = jobs / tag / "job.yaml"
    path.parent.mkdir()
    if paced:
        shutil.copy(REPO / "configs" / "own_train.py", path.parent)
        shutil.copy(Path(__file__).with_name("paced_train.py"), path.parent)
    path.write_text(paced_yaml(steps, f"{NAME}-{tag}", f"{tag}.release") if paced else job_yaml(steps, f"{NAME}-{tag}"))
    return path


def cli(env: dict[str, str], *args: str, timeout: float | None = None) -> CliResult:
    """`deepvm ARGS` on the module's cluster, asserting it succeeded. In this process (main_in_process), since
    the scenarios poll `jobs` and `status` every few seconds and a process per line cost 2 CPU-s of imports
    each; a line given a `timeout` (one that follows a job, minutes) runs as a process that can be cut off."""
    result = deepvm_line(*args, env=env, timeout=timeout)
    assert result.returncode == 0, f"deepvm {' '.join(args)}: {result.stderr[-3000:]}"
    return result


def job_state(env: dict[str, str], job_id: str) -> dict:
    (found,) = [j for j in json.loads(cli(env, "jobs", "mg", "--json").stdout) if j["job_id"] == job_id]
    return found


def wait_for(env: dict[str, str], job_id: str, step: int, timeout_s: float = 240) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = job_state(env, job_id)
        if state["step"] >= step or state["status"] != "running":
            return state
        time.sleep(2)
    raise AssertionError(f"{job_id} did not reach step {step} in {timeout_s:.0f}s")


def newest_job(env: dict[str, str]) -> str:
    return json.loads(cli(env, "jobs", "mg", "--json").stdout)[0]["job_id"]


@contextlib.contextmanager
def detached(env: dict[str, str], job: Path) -> Iterator[str]:
    """`deepvm train JOB --detach` on the module's cluster; the job's id. A scenario that fails leaves its
    job cancelled (`--now`), so the next one finds the cluster free, as the README asks of every scenario."""
    cli(env, "train", str(job), "--cluster", "mg", "--detach", timeout=240)
    job_id = newest_job(env)
    try:
        yield job_id
    except BaseException:
        run_cli("cancel", job_id, "--now", env=env, timeout=120)
        raise


def spot_trainer(env: dict[str, str]) -> str:
    status = json.loads(cli(env, "status", "mg", "--json").stdout)
    return next(n["instance_id"] for n in status["nodes"] if n["market"] == "spot" and n["state"] == "running")


def run_on_head(env: dict[str, str], script: str) -> str:
    """Run a shell script on the head as the cluster's login user (the way an operator would)."""
    code = (
        "import sys; from training.client.managed import find_head; from training.shared.transport import run_command\n"
        "out = []; h = find_head('mg', sys.executable)\n"
        "sys.exit(run_command(h.host, sys.argv[1], lambda line: print(line.text)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, script],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def release_the_pace(env: dict[str, str], tag: str) -> None:
    """From now on the paced job `tag` trains at full speed on every node, those that boot later included
    (paced_train.py): a replacement still being bought when the test releases the job would otherwise hold
    every rank of its attempts to the pace (DDP steps together) until the end. A daemon thread keeps the
    release file on every host's home until this test process ends."""
    hosts = Path(env["DEEPVM_HOME"]) / "sandbox" / "hosts"
    _touch_releases(hosts, tag)
    threading.Thread(target=_keep_released, args=(hosts, tag), daemon=True, name=f"release-{tag}").start()


def _keep_released(hosts: Path, tag: str, for_s: float = 900.0) -> None:
    until = time.monotonic() + for_s
    while time.monotonic() < until:
        time.sleep(0.5)
        _touch_releases(hosts, tag)


def _touch_releases(hosts: Path, tag: str) -> None:
    for home in hosts.glob("*/home/*"):
        release = home / f"{tag}.release"
        if not release.exists():
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):  # a terminated node's host goes
                release.touch()


def replaced(log: str) -> bool:
    """Whether the log shows the notice's recovery done and the head's replacement node training: it joins
    the notice's relaunch when it is ready in time, else it is folded in by a relaunch of its own."""
    attempts = [line for line in log.splitlines() if line.startswith("attempt ")]
    ready = re.search(r"^replacement i-[0-9a-f]+ ready", log, re.MULTILINE)
    return "recovered (notice)" in log and ready is not None and "3 trainers" in attempts[-1]


def node_processes(env: dict[str, str]) -> dict[int, str]:
    """Processes on the cluster's nodes (below any of the module's sandbox hosts), by pid."""
    return procs.node_processes(env["DEEPVM_HOME"])


def job_processes(env: dict[str, str]) -> dict[int, str]:
    """A job's processes on the nodes; a node's warm server is the node's, not a job's (training.node.warm:
    each rank forked from it names itself `python -m training.node.rank ...`, and is counted)."""
    return {
        pid: line
        for pid, line in node_processes(env).items()
        if ("training." in line and "training.node.warm --serve" not in line)
        or "mpirun" in line
        or "orted" in line
        or "prted" in line
    }


def local_deepvm(env: dict[str, str]) -> list[str]:
    """deepvm processes on the user's side (not on a node) working for this module's home."""
    nodes = node_processes(env)
    found = []
    for pid, line in procs.processes().items():
        if pid in nodes or pid == os.getpid() or "deepvm_cli" not in line:
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if env["DEEPVM_HOME"].encode() in environ:
            found.append(line)
    return found


def assert_each_node_pinned_to_its_own_key(env: dict[str, str]) -> None:
    """Every running node, the replacement the head bought included, is pinned on this machine at its own
    address with its own key; the head pinned each with the same key (the replacement's learnt there, from
    its console output, with the head's own role)."""
    status = json.loads(cli(env, "status", "mg", "--json").stdout)  # adopts the head's replacement
    running = {n["instance_id"]: n["public_ip"] or n["private_ip"] for n in status["nodes"] if n["state"] == "running"}
    cli(env, "jobs", "mg")  # a command that reaches the nodes pins those this machine has no key for yet
    here = Path(env["DEEPVM_HOME"]) / "clusters" / "mg"
    known = dict(line.split(maxsplit=1) for line in (here / "known_hosts").read_text().splitlines())
    assert sorted(known) == sorted(running.values()) and len(set(known.values())) == len(running)
    pins = {iid: (here / "host_keys" / iid).read_text().strip() for iid in running}
    assert all(known[address] == pins[iid] for iid, address in running.items())
    on_head = run_on_head(env, "cd deepvm/managed/clusters/mg/host_keys && grep -H . *").splitlines()
    head_pins = dict(line.split(":", 1) for line in on_head)
    assert {iid: head_pins[iid] for iid in running} == pins


def assert_no_user_credentials(env: dict[str, str]) -> None:
    """The canary secret is in no node process's environment or command line, and in no node's files."""
    for pid, line in node_processes(env).items():
        assert CANARY not in line
        try:
            assert CANARY.encode() not in Path(f"/proc/{pid}/environ").read_bytes(), line
        except OSError:
            continue
    hosts = Path(env["DEEPVM_HOME"]) / "sandbox" / "hosts"
    hits = subprocess.run(["grep", "-rlF", CANARY, str(hosts)], capture_output=True, text=True)
    assert hits.stdout == "", hits.stdout


def sandbox_client(env: dict[str, str], service: str) -> Any:
    """A boto3 client of the sandbox of DEEPVM_HOME env's (its moto server), as anyone with its endpoint would
    call it: behind deepvm's back."""
    with pytest.MonkeyPatch.context() as patch:  # each test has a home of its own (tests/conftest.py)
        patch.setenv("DEEPVM_HOME", env["DEEPVM_HOME"])
        info = load_info()
    assert info is not None, "the sandbox does not run"
    return info.context(REGION).client(service)


def down_leaves_nothing_running(env: dict[str, str]) -> None:
    """A module's last scenario: `down` deletes the cluster and nothing of it runs on any node."""
    cli(env, "down", "mg", "--yes", timeout=300)
    assert node_processes(env) == {}
