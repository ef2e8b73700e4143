"""Warm starts (training.node.warm): the first start is cold and leaves a server; later ones are its forks,
with the starter's argv, environment, directory and streams, its signals and its exit status; a killed
starter takes its rank with it; ranks under a real mpirun initialise MPI as forks and finish cleanly."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from worker_jobs import end_warm_servers

from training.control.staging import stage_runtime, warm_server_line
from training.node.warm import server_key

REPO = Path(__file__).resolve().parents[2]

PROBE = """\
import json, os, signal, sys, time
preloaded = "torch" in sys.modules
mode = sys.argv[1]
if mode == "report":
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "pid": os.getpid(), "ppid": os.getppid(),
                      "probe": os.environ.get("PROBE"), "preloaded": preloaded}), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    sys.exit(int(sys.argv[2]))
if mode == "wait":
    signal.signal(signal.SIGUSR1, lambda *_: sys.exit(7))
    print(json.dumps({"pid": os.getpid()}), flush=True)
    time.sleep(120)
if mode == "signal":
    os.kill(os.getpid(), signal.SIGTERM)
if mode == "killed":  # as the OOM killer ends a rank
    os.kill(os.getpid(), signal.SIGKILL)
"""

MPI_PROBE = """\
import os, sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
print(f"rank {comm.Get_rank()} of {comm.Get_size()} total {total} warm {os.getppid() == int(sys.argv[1])}", flush=True)
"""


@pytest.fixture
def node(tmp_path):
    """(warm directory, environment): every server the test started there is ended afterwards."""
    (tmp_path / "warm_probe.py").write_text(PROBE)
    (tmp_path / "warm_mpi_probe.py").write_text(MPI_PROBE)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}", "PROBE": "through"}
    env.pop("DEEPVM_COLD_START", None)
    yield tmp_path / "warm", env
    end_warm_servers(tmp_path / "warm")


def starter(node, *args: str, **popen) -> subprocess.Popen:
    directory, env = node
    return subprocess.Popen(
        [sys.executable, "-m", "training.node.warm", str(directory), *args],
        cwd=directory.parent,
        env=env,
        text=True,
        **popen,
    )


def report(node, code: int = 0) -> tuple[subprocess.CompletedProcess, dict]:
    proc = starter(node, "warm_probe", "report", str(code), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), json.loads(out.splitlines()[0])


def start_server(directory: Path, env: dict[str, str], runtime: Path = REPO) -> Path:
    """Start the node's server as preparing a node does (training.control.staging.warm_server_line), deepvm's
    code for the nodes in `runtime`; its socket, once there."""
    line = warm_server_line(sys.executable).replace('"$HOME/deepvm/runtime"', str(runtime))
    # from the node's home, as its SSH session starts it: no deepvm in the directory the server starts in
    subprocess.run(
        ["bash", "-c", line.replace('"$HOME/deepvm/warm"', str(directory))],
        env=env,
        check=True,
        cwd=directory.parent,
        timeout=30,
    )
    socket_path = directory / f"{server_key(sys.executable)}.sock"
    deadline = time.monotonic() + 120
    while not socket_path.exists():
        assert time.monotonic() < deadline, "no warm server came up"
        time.sleep(0.05)
    return socket_path


def warm_server(node) -> int:
    """Start the node's server; its pid once it answers (recorded, to be ended after the test)."""
    directory, env = node
    socket_path = start_server(directory, env)
    _, seen = report(node)
    assert seen["preloaded"], seen
    assert (directory / socket_path.with_suffix(".lock").name).read_text().strip() == str(seen["ppid"])
    return seen["ppid"]


def test_without_a_server_a_start_is_cold_with_one_a_fork_with_the_starters_argv_env_cwd_streams_and_exit(node):
    result, cold = report(node, code=3)
    assert result.returncode == 3 and not cold["preloaded"] and "to stderr" in result.stderr
    assert not node[0].exists()  # a starter never starts a server (preparing the node does)
    server = warm_server(node)
    assert warm_server(node) == server  # a second start for the same Python and torch leaves at once
    result, warm = report(node, code=5)
    assert result.returncode == 5 and warm["preloaded"] and warm["ppid"] == server
    assert (warm["argv"], warm["probe"], warm["cwd"]) == (["report", "5"], "through", str(node[0].parent))
    assert "to stderr" in result.stderr  # the rank writes to the starter's own streams
    proc = starter(node, "warm_probe", "wait", stdout=subprocess.PIPE)
    assert proc.stdout is not None
    rank = json.loads(proc.stdout.readline())["pid"]
    title = Path(f"/proc/{rank}/cmdline").read_bytes().decode()
    assert "-m warm_probe wait" in title and "--serve" not in title  # named as the cold rank would be
    proc.kill()
    proc.wait(timeout=30)


OURS_PROBE = """\
import json, os, sys
preloaded = "training.shared.jobspec" in sys.modules
from training.shared import events
print(json.dumps({"preloaded": preloaded, "mark": getattr(events, "MARK", None), "ppid": os.getppid()}), flush=True)
"""


def test_a_rank_runs_the_deepvm_on_the_node_though_its_server_imported_an_older_one(node, tmp_path):
    """The server imports deepvm's modules every rank imports (training.node.warm.PRELOAD_OURS) and lives across
    jobs, whose pushes change deepvm's code on the node: a rank forked after such a change imports it anew."""
    directory, env = node
    runtime = stage_runtime(tmp_path / "runtime")  # deepvm's code on the node, as preparing it pushes it
    (tmp_path / "ours_probe.py").write_text(OURS_PROBE)
    env = {**env, "PYTHONPATH": f"{runtime}{os.pathsep}{tmp_path}"}
    server = int(start_server(directory, env, runtime).with_suffix(".lock").read_text())

    def probe() -> dict:
        out = subprocess.run(
            [sys.executable, "-m", "training.node.warm", str(directory), "ours_probe"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        return json.loads(out.splitlines()[0])

    assert probe() == {"preloaded": True, "mark": None, "ppid": server}
    with (runtime / "training" / "shared" / "events.py").open("a") as changed:  # the next job's deepvm
        changed.write("\nMARK = 2\n")
    assert probe() == {"preloaded": False, "mark": 2, "ppid": server}  # still a fork: torch stays imported


GATED = """\
import os, pathlib, time
while not pathlib.Path(os.environ["IMPORT_GATE"]).exists():  # the server's imports last until the test opens it
    time.sleep(0.05)
def setproctitle(title):
    pass
"""


def test_a_start_while_the_server_still_imports_waits_for_it_and_one_whose_server_dies_meanwhile_runs_cold(
    node, tmp_path
):
    """The first launch after preparing a node finds its server importing: its ranks wait for that import (one
    for the node) instead of importing torch each. A server that dies before it forked the rank leaves it cold."""
    directory, env = node
    gated = tmp_path / "gated"
    gated.mkdir()
    (gated / "setproctitle.py").write_text(GATED)  # the server's last import, held until the gate opens
    gate = tmp_path / "gate"
    server_env = {**env, "PYTHONPATH": f"{gated}{os.pathsep}{env['PYTHONPATH']}", "IMPORT_GATE": str(gate)}
    socket_path = start_server(directory, server_env)
    server = int(socket_path.with_suffix(".lock").read_text())
    waiting = starter(node, "warm_probe", "report", "4", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with pytest.raises(subprocess.TimeoutExpired):
        waiting.wait(timeout=1.0)  # no cold start beside the importing server: it waits
    gate.touch()
    out, _ = waiting.communicate(timeout=120)
    warm = json.loads(out.splitlines()[0])
    assert waiting.returncode == 4 and warm["preloaded"] and warm["ppid"] == server, warm

    gate.unlink()
    other = tmp_path / "warm-other"  # a node of its own: no server there but the one this test kills
    socket_path = start_server(other, server_env)
    server = int(socket_path.with_suffix(".lock").read_text())
    orphan = starter((other, env), "warm_probe", "report", "6", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with pytest.raises(subprocess.TimeoutExpired):
        orphan.wait(timeout=1.0)
    os.kill(server, signal.SIGKILL)  # before it forked any rank
    out, _ = orphan.communicate(timeout=120)
    cold = json.loads(out.splitlines()[0])
    assert orphan.returncode == 6 and not cold["preloaded"] and cold["pid"] == orphan.pid, cold  # itself, exec'd


def test_signals_reach_the_rank_and_a_rank_ended_by_a_signal_ends_its_starter_so(node):
    warm_server(node)
    proc = starter(node, "warm_probe", "wait", stdout=subprocess.PIPE)
    assert proc.stdout is not None
    json.loads(proc.stdout.readline())
    proc.send_signal(signal.SIGUSR1)  # as mpirun forwards it: the clean stop
    assert proc.wait(timeout=60) == 7
    signalled = starter(node, "warm_probe", "signal")
    assert signalled.wait(timeout=60) == -signal.SIGTERM
    killed = starter(node, "warm_probe", "killed", stderr=subprocess.PIPE)
    _, err = killed.communicate(timeout=60)
    assert killed.returncode == -signal.SIGKILL and "Invalid argument" not in err  # issue 40 point 6: EINVAL


def test_a_starter_killed_takes_its_rank_with_it(node):
    warm_server(node)
    proc = starter(node, "warm_probe", "wait", stdout=subprocess.PIPE)
    assert proc.stdout is not None
    rank = json.loads(proc.stdout.readline())["pid"]
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{rank}").exists() and "Z" not in Path(f"/proc/{rank}/stat").read_text().split()[2]:
        assert time.monotonic() < deadline, "the rank outlived its starter"
        time.sleep(0.1)


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
def test_ranks_started_warm_under_mpirun_initialise_mpi_and_finish_cleanly(node):
    directory, env = node
    server = warm_server(node)
    env = {**env, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    result = subprocess.run(
        [
            "mpirun",
            "-np",
            "3",
            "--oversubscribe",
            "--bind-to",
            "none",
            "--mca",
            "btl_tcp_if_include",
            "lo",
            "-x",
            "PYTHONPATH",
            sys.executable,
            "-m",
            "training.node.warm",
            str(directory),
            "warm_mpi_probe",
            str(server),
        ],
        cwd=directory.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank "))
    assert lines == [f"rank {r} of 3 total 6 warm True" for r in range(3)], result.stdout + result.stderr
