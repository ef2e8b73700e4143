"""Tiny job specs and helpers for running the worker and training.node.rank in tests.

TINY is ResNet-18 at width 8 (0.7 MB of weights, 64x fewer than its width 64): what these tests show does not
hang on the network's size, and its 45 MB of weights at width 64 cost every step, save and DDP broadcast."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

TINY = """\
name: tiny
seed: {seed}
model: {{name: resnet18, num_classes: 4, width: 8}}
dataset: {{kind: synthetic, samples: 96, image_shape: [3, 16, 16], classes: 4, seed: 0}}
steps: {steps}
batch_size: 4
log_every: 2
optimizer: {{name: sgd, lr: 0.02, momentum: 0.9}}
schedule: {{name: cosine, warmup_steps: 1}}
"""


def tiny_job(folder: Path, steps: int = 6, seed: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tiny.yaml"
    path.write_text(TINY.format(steps=steps, seed=seed))
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_ranks(
    job: Path,
    roles: str,
    imds_url: str,
    planned_trainers: int = 2,
    warm: Path | None = None,
    extra: Sequence[str] = (),
) -> subprocess.Popen:
    """`python -m training.node.rank` under a local mpirun, one rank per role; out/ and ckpt/ beside the job file;
    `extra`: more of the rank's arguments.

    The ranks watch the IMDSv2 endpoint at imds_url for Spot notices. Given `warm` (warm_server's directory),
    each rank starts as a node's ranks do, a fork of its warm server; else cold, `python -m` of its own.
    """
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        AWS_EC2_METADATA_SERVICE_ENDPOINT=imds_url,
    )
    command = [
        "mpirun",
        "-np",
        str(len(roles.split(","))),
        "--oversubscribe",
        "--bind-to",
        "none",
        "-x",
        "PYTHONPATH",
        "-x",
        "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        "-x",
        "OMP_NUM_THREADS=1",
        sys.executable,
        "-W",
        "ignore",
        "-m",
        *through(warm),
        "training.node.rank",
        str(job),
        "--out",
        str(job.parent / "out"),
        "--checkpoint-dir",
        str(job.parent / "ckpt"),
        "--roles",
        roles,
        "--planned-trainers",
        str(planned_trainers),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        *extra,
    ]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def events_with_a_notice_at(
    proc: subprocess.Popen, step: int, post_notice: Callable[[], None], timeout: float
) -> list[dict]:
    """The rank events of a launch (launch_ranks) to its end, calling `post_notice` once its step `step` is
    seen; asserts the launch exited 0."""
    events: list[dict] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            events.append(json.loads(line))
            if events[-1]["event"] == "step" and events[-1]["step"] == step:
                post_notice()
    _, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, stderr[-3000:]
    return events


def output_with_a_notice_at(
    proc: subprocess.Popen, line_seen: Callable[[str], bool], post_notice: Callable[[], None], timeout: float
) -> tuple[str, str]:
    """A launch's (launch_ranks) whole stdout and stderr, calling `post_notice` once at the first stdout line for which
    `line_seen` holds; asserts the launch exited 0."""
    lines: list[str] = []
    assert proc.stdout is not None
    posted = False
    for line in proc.stdout:
        lines.append(line)
        if not posted and line_seen(line):
            post_notice()
            posted = True
    _, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, stderr[-3000:]
    return "".join(lines), stderr


def event_lines(stdout: str) -> list[dict]:
    """deepvm's event lines of a launch's stdout (a script's own JSON lines left out)."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"event"')]


def is_step(line: str, step: int) -> bool:
    """Whether `line` is trainer 0's event of step `step`."""
    return line.startswith('{"event": "step"') and json.loads(line)["step"] == step


def through(warm: Path | None) -> list[str]:
    """What comes between `python -m` and a rank's module: its node's warm starter, or nothing (cold)."""
    return [] if warm is None else ["training.node.warm", str(warm)]


@contextlib.contextmanager
def warm_server(directory: Path) -> Iterator[Path]:
    """This machine as one node of the ranks the tests start: its warm server (training.node.warm), which
    preparing a node starts, serving from `directory` until the block ends. The ranks the tests start through it
    (launch_ranks(warm=...)) are forks of one interpreter that imported torch once, as on a node after its first
    launch, instead of each importing torch (4-5 CPU-s a rank on the shared cores)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "training.node.warm", "--serve", str(directory)],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(directory.glob("*.sock")):  # it listens before it imports: a starter then waits for it
            assert server.poll() is None and time.monotonic() < deadline, "the warm server did not start"
            time.sleep(0.05)
        yield directory
    finally:
        server.terminate()
        server.wait(timeout=60)


def end_warm_servers(directory: Path, wait_s: float = 60.0) -> None:
    """End the warm servers (training.node.warm) a test started in `directory`, each by the pid its lock file
    holds; one still starting (its lock file there but empty) is waited for, up to `wait_s`."""
    import signal
    import time

    deadline = time.monotonic() + wait_s
    for lock in directory.glob("*.lock"):
        while not (text := lock.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        if text:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(text), signal.SIGTERM)
