"""Managed training end to end in the sandbox: the job's controller runs on the Tiering cluster's
on-demand head (the holder), under its supervisor, and the user's machine only submits, follows, cancels
and fetches. Real sshd hosts, real mpirun, real training; the "laptop" is this test's CLI processes.

The laptop test's job is the shipped example script held to a slow pace until the test has seen what it
waits for (paced_train.py): it outlasts the two minutes it must on any machine, and no more; the cancel
test's job is ResNet-18.
One cluster serves the module. The user's environment carries canary AWS credentials: the sandbox never
uses them, and no node may ever see them (no file, no environment, no command line).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.cloud import procs
from tests.cloud.plans import make_tiering_plan
from tests.conftest import REPO, run_cli

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox boots namespaced sshd hosts and needs root"),
]

EVERY = 5  # checkpoint interval, steps
LAPTOP_STEPS = 800  # held at PACE_S a step, the laptop job could train for 400 s: the test releases it sooner
PACE_S = 0.5
REBALANCE_STEPS = 200  # held at PACE_S a step, 100 s: the test releases it once the recommendation is handled
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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(env, job directory); the cluster is deleted afterwards and nothing of it may run."""
    root = tmp_path_factory.mktemp("managed-e2e")
    env = {"DEEPVM_HOME": str(root / "home"), "AWS_ACCESS_KEY_ID": "AKIACANARY", "AWS_SECRET_ACCESS_KEY": CANARY}
    plan = make_tiering_plan()  # planned under a cap with room for a repair of another type (the ladder's)
    (root / "plan.json").write_text(json.dumps(replace(plan, price_cap=plan.price_per_hour + 1.0).to_dict()))
    jobs = root / "jobs"
    jobs.mkdir()
    up = run_cli("up", "--plan", str(root / "plan.json"), "--name", "mg", "--cloud", "sandbox", "--yes",
                 "--json", env=env, timeout=180)  # fmt: skip
    assert up.returncode == 0, up.stderr
    try:
        yield env, jobs
    finally:
        run_cli("down", "mg", "--yes", "--cancel-jobs", env=env, timeout=300)
        run_cli("sandbox", "stop", env=env, timeout=120)


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


def cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    result = run_cli(*args, env=env, timeout=timeout)
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
    result = subprocess.run([sys.executable, "-c", code, script], cwd=REPO, env={**os.environ, **env},
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def release_the_pace(env: dict[str, str], tag: str) -> None:
    """From now on the paced job `tag` trains at full speed on every node there is (paced_train.py)."""
    for home in (Path(env["DEEPVM_HOME"]) / "sandbox" / "hosts").glob("*/home/*"):
        with contextlib.suppress(FileNotFoundError):  # a terminated node's host goes away
            (home / f"{tag}.release").touch()


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
    return {pid: line for pid, line in node_processes(env).items()
            if "training." in line or "mpirun" in line or "orted" in line or "prted" in line}  # fmt: skip


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


@pytest.mark.timeout(900)  # it must train on for over two minutes after the laptop is gone
def test_job_outlives_the_laptop_a_controller_crash_and_a_notice(cluster):
    env, jobs = cluster
    job = write_job(jobs, LAPTOP_STEPS, "laptop", paced=True)
    train = subprocess.Popen(
        [sys.executable, "-m", "deepvm_cli", "train", str(job), "--cluster", "mg"],
        cwd=REPO, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
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
    job = write_job(jobs, 400, "cancel")
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


class Terminal:
    """`deepvm ARGS` on a pseudo-terminal of 80 x 24, as a person runs it: everything it draws is kept in
    `screen` (escape codes and all), and `ctrl_c` types Ctrl-C (the terminal sends SIGINT)."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        import pty

        child_env = {k: v for k, v in {**os.environ, **env}.items() if k not in ("COLUMNS", "LINES")}
        child_env["TERM"] = "xterm-256color"
        self.pid, self._fd = pty.fork()
        if self.pid == 0:  # the child: the terminal is its own, sized 80 x 24 before deepvm asks
            import fcntl
            import struct
            import termios

            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
            os.chdir(REPO)
            os.execve(sys.executable, [sys.executable, "-m", "deepvm_cli", *args], child_env)
        self.screen = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 65536)
            except OSError:  # the child is gone
                return
            if not data:
                return
            self.screen += data.decode(errors="replace")

    def wait_for(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.screen:
            assert time.monotonic() < deadline, f"{text!r} never shown; the screen ends:\n{self.screen[-3000:]}"
            time.sleep(0.2)

    def ctrl_c(self) -> int:
        """Type Ctrl-C; the exit status."""
        os.write(self._fd, b"\x03")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._reader.join(5)
                os.close(self._fd)
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.1)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError("deepvm watch did not leave on Ctrl-C")


def tensorboard_scalars(directory: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory))
    accumulator.Reload()
    return [(e.step, e.value) for e in accumulator.Scalars(tag)]


@pytest.mark.timeout(600)
def test_watch_shows_a_notice_on_the_timeline_and_the_run_stays_one_tensorboard_run(cluster):
    """deepvm watch in a terminal of 80 x 24 while a notice hits the job; Ctrl-C leaves nothing behind on
    either side; the job's TensorBoard files (written on the head) come with `fetch`, each step once."""
    env, jobs = cluster
    steps = 300  # at PACE_S a step, it trains until the test releases it
    with detached(env, write_job(jobs, steps, "watch", paced=True)) as job_id:
        watch_through_a_notice(env, job_id, steps)


def watch_through_a_notice(env: dict[str, str], job_id: str, steps: int) -> None:
    wait_for(env, job_id, 3)
    terminal = Terminal(env, "watch", job_id, "--every", "1")
    terminal.wait_for("loss ", 60)
    terminal.wait_for("$/h now", 60)
    terminal.wait_for("trainer  spot", 60)  # the nodes, by role and market
    cli(env, "interrupt", spot_trainer(env), "--after", "10")
    terminal.wait_for("Spot interruption notice on", 120)  # on the timeline
    assert terminal.ctrl_c() == 0
    assert local_deepvm(env) == []  # nothing of the watch on this side...
    deadline = time.monotonic() + 10
    while any("training.head.query" in line for line in node_processes(env).values()):
        assert time.monotonic() < deadline, "the head's side of the watch outlived it"
        time.sleep(0.2)
    # the screen it left in the terminal, drawn after the terminal's echo of Ctrl-C, line by line (rich returns
    # to the start of a line, \r, before it draws over it): one frame that fits 80 x 24
    last = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", terminal.screen.rsplit("^C", 1)[-1])
    drawn = [line for line in re.split(r"[\r\n]", last) if line.strip()]
    assert drawn[0].startswith(f"{job_id} · ") and len(drawn) <= 24, "\n".join(drawn)
    assert all(len(line) <= 80 for line in drawn), "\n".join(repr(line) for line in drawn)

    release_the_pace(env, "watch")
    assert "job completed" in cli(env, "logs", job_id, "-f", "--tail", "1", timeout=300).stdout
    plain = cli(env, "watch", job_id).stdout  # not a terminal: plain lines, the job over
    assert "Spot interruption notice on" in plain and f"{job_id} · completed: step {steps}/{steps}" in plain
    out = Path(env["DEEPVM_HOME"]) / "fetched-watch"
    fetched = cli(env, "fetch", job_id, "--out", str(out))
    assert "tensorboard --logdir" in fetched.stderr and (out / "log.jsonl").is_file()
    loss = tensorboard_scalars(out / "tensorboard", "loss")
    assert [step for step, _ in loss] == list(range(1, steps + 1))  # across the notice's relaunch: each step once
    assert len(tensorboard_scalars(out / "tensorboard", "accuracy")) == steps


def test_a_rebalance_recommendation_alone_keeps_its_node_training_and_buys_nothing(cluster):
    """Issue 21 item 3: a recommendation used to exclude its node, buy a replacement and leave the excluded
    node running (billing) until `down`. Now the node trains on and its trainers checkpoint early
    (training/control/attempts.py says why), nothing is lost, and the cluster runs no more than its plan."""
    env, jobs = cluster
    with detached(env, write_job(jobs, REBALANCE_STEPS, "rebalance", paced=True)) as job_id:
        recommend_a_rebalance(env, job_id)


def recommend_a_rebalance(env: dict[str, str], job_id: str) -> None:
    assert wait_for(env, job_id, 2)["status"] == "running"
    node = spot_trainer(env)
    cli(env, "interrupt", node, "--rebalance-only")
    deadline = time.monotonic() + 120
    while "(rebalance)" not in (log := cli(env, "logs", job_id).stdout):  # the early checkpoint, then on
        assert time.monotonic() < deadline, log[-2000:]
        time.sleep(2)
    release_the_pace(env, "rebalance")
    assert "job completed" in cli(env, "logs", job_id, "-f", "--tail", "5", timeout=300).stdout
    log, state = cli(env, "logs", job_id).stdout, job_state(env, job_id)
    assert state["status"] == "completed" and state["step"] == REBALANCE_STEPS and state["lost_steps"] == 0, state
    assert "rebalance recommendation on " in log and "attempt 2" not in log  # one launch: nothing stopped it
    assert "buying " not in log and "not using it" not in log, log[-3000:]  # nothing bought, nothing dropped
    status = json.loads(cli(env, "status", "mg", "--json").stdout)
    running = [n["instance_id"] for n in status["nodes"] if n["state"] == "running"]
    assert node in running and len(running) <= sum(g.count for g in make_tiering_plan().nodes), status


@pytest.mark.timeout(600)
def test_an_empty_spot_pool_is_repaired_with_another_type_the_head_buys_and_status_adopts(cluster):
    """The plan's pool (g4dn.xlarge Spot in its zone) emptied with `deepvm sandbox capacity`: after a notice the
    head's ladder buys like the plan, meets EC2's InsufficientInstanceCapacity, and repairs with another Spot
    type within the plan's cap; that node trains, the job completes with no step lost, and the user's side
    knows the node as the trainer it was bought for (its tags), though the plan has no group of its type."""
    env, jobs = cluster
    zone = make_tiering_plan().availability_zone
    cli(env, "sandbox", "capacity", "--zone", zone, "--type", "g4dn.xlarge", "--market", "spot", "--available", "0")
    try:
        job = write_job(jobs, 300, "repair", paced=True)
        cli(env, "train", str(job), "--cluster", "mg", "--detach", timeout=240)
        job_id = newest_job(env)
        wait_for(env, job_id, 3)
        cli(env, "interrupt", spot_trainer(env), "--after", "10")
        deadline = time.monotonic() + 300
        while not re.search(r"^replacement i-[0-9a-f]+ ready", log := cli(env, "logs", job_id).stdout, re.MULTILINE):
            assert time.monotonic() < deadline and "job failed" not in log, log[-3000:]
            time.sleep(2)
        release_the_pace(env, "repair")
        assert "job completed" in cli(env, "logs", job_id, "-f", "--tail", "1", timeout=300).stdout
    finally:
        cli(env, "sandbox", "capacity", "--clear")
    log = cli(env, "logs", job_id).stdout
    assert "InsufficientInstanceCapacity" in log, log[-3000:]
    repair = re.search(r"^ladder: repair: .* repairing with 1 (\S+) at ", log, re.MULTILINE)
    assert repair and repair[1] != "g4dn.xlarge", log[-3000:]
    state = job_state(env, job_id)
    assert state["status"] == "completed" and state["lost_steps"] == 0, state
    nodes = json.loads(cli(env, "status", "mg", "--json").stdout)["nodes"]
    (bought,) = [n for n in nodes if n["instance_type"] == repair[1] and n["state"] == "running"]
    assert bought["role"] == "trainer" and bought["market"] == "spot" and bought["availability_zone"] == zone


@pytest.mark.timeout(420)
def test_a_job_that_does_not_step_ends_at_idle_with_its_summary_and_the_hook_told(cluster):
    """--idle on the head (issue 25): a job whose script never steps (paced far beyond the limit, its release
    file never made) ends as failed after --idle; its supervisor's end writes the run's summary, the --notify-cmd
    hook on the head hears the failure, and the job's log says once what the cluster still bills."""
    env, jobs = cluster
    path = write_job(jobs, 40, "idle", paced=True)
    path.write_text(path.read_text().replace(f'["{PACE_S}",', '["600",'))  # never released (idle.release)
    hook = "deepvm-hook.jsonl"  # in the login user's home on the head
    cli(env, "train", str(path), "--cluster", "mg", "--detach", "--idle", "0.3",
        "--notify-cmd", f'{{ cat; echo; }} >> "$HOME/{hook}"', "--json")  # fmt: skip
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


def test_zz_down_leaves_nothing_running(cluster):
    env, _ = cluster
    cli(env, "down", "mg", "--yes", timeout=300)
    assert node_processes(env) == {}
