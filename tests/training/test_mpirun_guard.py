"""training.head.mpirun_guard, the supervisor of mpirun on the head node, around a real local mpirun: the commands
on its stdin, the end of stdin and a lapsed lease, its output and its exit code, and that nothing mpirun
started outlives it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from training.control.launcher import _TAG

REPO = Path(__file__).resolve().parents[2]
RANK = """\
import os, signal, subprocess, sys, time
def say(text, stream=sys.stdout):  # in one piece, as the worker's lines: a line split in two is tagged twice
    stream.write(text + "\\n")
    stream.flush()
mode = sys.argv[1]
if mode == "fail":  # leaving a child of its own behind
    say(f"oops {subprocess.Popen(['sleep', '300'], start_new_session=True).pid}", sys.stderr)
    sys.exit(3 if os.environ["OMPI_COMM_WORLD_RANK"] == "1" else 0)
if mode == "clean":
    signal.signal(signal.SIGUSR1, lambda *_: (say("flushed"), sys.exit(0)))
if mode == "stacks":  # as every rank of a job: training.node.rank's main arms it first
    from training.node.rank import show_stacks_on_signal
    show_stacks_on_signal()
if mode == "stubborn":  # as a holder: deaf to the clean stop and to SIGTERM, with a child of its own
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "300"], start_new_session=True).pid
else:
    child = os.getpid()
say(f"ready {os.getpid()} {os.getppid()} {child}")
while True:
    time.sleep(0.1)
"""

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun"),
]


def mpirun_guard(tmp_path: Path, mode: str, *options: str) -> subprocess.Popen:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_")}  # mpirun_guard allows root itself
    command = [
        sys.executable,
        "-m",
        "training.head.mpirun_guard",
        *options,
        "--",
        "mpirun",
        "-np",
        "2",
        "--oversubscribe",
        "--bind-to",
        "none",
        "--tag-output",
        sys.executable,
        str(script),
        mode,
    ]
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def ready(proc: subprocess.Popen) -> set[int]:
    """Once both ranks run: the pids of mpirun, the ranks and their children."""
    assert proc.stdout is not None
    pids: dict[int, list[int]] = {}
    for line in proc.stdout:
        match = _TAG.match(line.rstrip("\n"))
        if match and match[3] == "stdout" and match[4].startswith("ready "):
            pids[int(match[2])] = [int(p) for p in match[4].split()[1:]]
            if len(pids) == 2:
                return {p for found in pids.values() for p in found}
    raise AssertionError(f"the ranks did not start: {proc.communicate()}")


def send(proc: subprocess.Popen, *lines: str) -> None:
    assert proc.stdin is not None
    for line in lines:
        proc.stdin.write(line + "\n")
    proc.stdin.flush()


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[str, str]:
    """The rest of its output once it exits; its stdin is left as it is (closing it would be the hard stop)."""
    out: dict[str, str] = {}
    readers = [
        threading.Thread(target=lambda name=name: out.__setitem__(name, getattr(proc, name).read()))
        for name in ("stdout", "stderr")
    ]
    for reader in readers:
        reader.start()
    proc.wait(timeout=timeout)
    for reader in readers:
        reader.join()
    return out["stdout"], out["stderr"]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_stop_reaches_every_rank_and_the_job_ends_cleanly(tmp_path):
    proc = mpirun_guard(tmp_path, "clean", "--lease", "30")
    pids = ready(proc)
    send(proc, "ping", "stop")  # stdin stays open: only the stop ends the job
    stdout, _ = finish(proc)
    assert proc.returncode == 0
    flushed = [m[2] for m in map(_TAG.match, stdout.splitlines()) if m and m[4] == "flushed"]
    assert sorted(flushed) == ["0", "1"]  # SIGUSR1 went through mpirun to both ranks
    assert not any(alive(p) for p in pids)
    proc.stdin.close()


def test_stacks_reach_every_rank_which_prints_its_threads_and_trains_on(tmp_path):
    """What the controller asks for before it kills an attempt it found hung: where each rank waits."""
    proc = mpirun_guard(tmp_path, "stacks", "--lease", "30")
    pids = ready(proc)
    assert proc.stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    send(proc, "stacks")

    def headers() -> set[str]:
        tagged = [m for m in map(_TAG.match, [line.rstrip("\n") for line in lines]) if m and m[3] == "stderr"]
        return {m[2] for m in tagged if m[4].startswith(("Current thread 0x", "Thread 0x"))}

    deadline = time.monotonic() + 30
    while headers() != {"0", "1"} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert headers() == {"0", "1"}, "".join(lines[-40:])
    assert any('File "' in line and "rank.py" in line for line in lines)  # the script's own frame
    assert all(alive(p) for p in pids)  # a rank goes on after its stacks
    send(proc, "kill 0.5")
    proc.wait(timeout=60)
    reader.join(timeout=10)
    proc.stdin.close()


@pytest.mark.parametrize("how", ["kill", "end of stdin", "lapsed lease", "SIGTERM"])
def test_the_hard_stop_leaves_nothing_running(tmp_path, how):
    proc = mpirun_guard(tmp_path, "stubborn", "--grace", "1", *(["--lease", "2"] if how == "lapsed lease" else []))
    pids = ready(proc)
    started = time.monotonic()
    if how == "kill":
        send(proc, "ping", "kill 0.5")
    elif how == "end of stdin":
        proc.stdin.close()
    elif how == "SIGTERM":
        proc.send_signal(signal.SIGTERM)
    _, stderr = finish(proc)
    assert proc.returncode != 0 and time.monotonic() - started < 30
    left = [p for p in pids if alive(p)]
    assert not left, f"still running: {left}"  # the ranks, their detached children and mpirun
    if how == "lapsed lease":
        assert "mpirun_guard: no word from the controller for 2s: stopping the job" in stderr


def test_a_killed_supervisor_takes_mpirun_with_it(tmp_path):
    proc = mpirun_guard(tmp_path, "plain")
    pids = ready(proc)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30  # mpirun gets SIGTERM (parent-death signal) and ends its ranks
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if alive(p)]
    proc.stdin.close()


def test_output_passes_through_the_exit_code_is_mpiruns_and_nothing_is_left(tmp_path):
    proc = mpirun_guard(tmp_path, "fail")
    _, stderr = finish(proc)
    assert proc.returncode == 3
    tagged = sorted(m.groups()[1:] for m in map(_TAG.match, stderr.splitlines()) if m)
    assert [(rank, stream, text.split()[0]) for rank, stream, text in tagged] == [
        ("0", "stderr", "oops"),
        ("1", "stderr", "oops"),
    ]
    assert not [pid for *_, text in tagged if alive(pid := int(text.split()[1]))]  # swept up at the end
    assert "mpirun detected that one or more processes exited with non-zero status" in stderr  # its own lines
    proc.stdin.close()


COUNTER = """\
import signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda *_: got.append(1))
print("ready", flush=True)
deadline = time.monotonic() + 1.5
while time.monotonic() < deadline:
    time.sleep(0.05)
print(f"sigterms {len(got)}", flush=True)
"""


def test_the_keeper_folds_repeated_death_signals_into_one_sigterm(tmp_path):
    """mpirun aborts without stopping its ranks on a second SIGTERM; the kernel can send the parent-death
    signal once per dying thread of mpirun_guard. The signal relay passes on one."""
    script = tmp_path / "counter.py"
    script.write_text(COUNTER)
    signal_relay = subprocess.Popen(
        [sys.executable, "-m", "training.head.signal_relay", "--", sys.executable, str(script)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert signal_relay.stdout is not None and signal_relay.stdout.readline() == "ready\n"
    for _ in range(3):
        signal_relay.send_signal(signal.SIGTERM)
        time.sleep(0.05)
    out, _ = signal_relay.communicate(timeout=30)
    assert out == "sigterms 1\n" and signal_relay.returncode == 0
