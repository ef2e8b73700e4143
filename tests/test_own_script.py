"""Issue 23, a user's own script the first time: what went wrong, run as the user ran it, so it stays fixed.

Every point that needs no cluster runs the CLI in this process (deepvm_cli.main.main, milliseconds a
command): 3 (a link that would not go), 5 (fetch --out), 6 (simulate on nodes living a second), 8 (config
set/unset on an unreadable file), 9 (the screen at 80 columns), 10 (the trace formats as documented). Those
that need real nodes share one sandbox cluster (a Single Anchor of two nodes: real sshd hosts, real
mpirun, real training): 3 (a linked script runs), 4 (fetch of a cancelled job), 7 (a script that never
steps), 9 (the detach hints and the billing reminder), 1 (a script that hangs before its first step) and 2 (one
that exits 3 at once: tried twice, its own error on screen). The controller's rules behind 1 and 2 are tested
in-process in tests/training/test_stall.py, test_attempts.py and test_controller.py.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path

import pytest
from rich.console import Console

from deepvm_cli.main import main
from deepvm_cli.render.job import describe_progress, progress_line
from deepvm_cli.ui import console, reporters
from simulation.traces.files import parse_trace_bytes
from tests.cloud.plans import make_plan
from tests.cloud.sandbox_cluster import sandbox_cluster
from tests.conftest import REPO
from training.shared.progress import Progress

_CURSOR = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`deepvm ARGS` in this process: exit code, stdout, stderr."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error(code: int, err: str) -> str:
    """The single `deepvm: error:` line of a refusal (exit code 2), without its prefix."""
    assert code == 2, err
    (line,) = err.splitlines()
    return line.removeprefix("deepvm: error: ")


def own_job(folder: Path, *, steps: int | None = 20, script: str = "train.py", calls_step: bool = True) -> Path:
    """A `run:` job file in `folder` (made if need be), its script named `script`."""
    folder.mkdir(parents=True, exist_ok=True)
    counted = f"steps: {steps}\n" if steps is not None else ""
    flag = "" if calls_step else ", calls_step: false"
    job = folder / "job.yaml"
    job.write_text(
        f"name: own\n{counted}log_every: 5\ncheckpoint: {{every_steps: 5, levels: [l1, l2]}}\n"
        f"run: {{script: {script}, args: [--batch-size, '4']{flag}}}\nenv: {{OMP_NUM_THREADS: '1'}}\n"
    )
    return job


# --- 3. symbolic links in the job directory ----------------------------------------------------------------


def test_a_link_that_would_not_go_is_refused_before_any_cluster(tmp_path, capsys):
    job = own_job(tmp_path / "job")
    (tmp_path / "job" / "train.py").write_text("")
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = canary\n")
    (tmp_path / "job" / "creds").symlink_to(secret)
    line = one_error(*run(capsys, "train", str(job))[::2])  # no cluster exists: the link is the first answer
    assert line == (
        f"{job.parent / 'creds'}: a symbolic link to {secret}, outside the job directory; deepvm pushes "
        f"{job.parent} as regular files and follows a link only to a regular file inside it: copy or "
        "move what the job needs into it"
    )


# --- 5. fetch --out ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["file", "empty", "proc", "below-a-file", "train"])
def test_every_local_path_error_of_out_is_one_line_before_any_node(case, tmp_path, capsys):
    taken = tmp_path / "taken.txt"
    taken.write_text("mine")
    out, expected = {
        "file": (str(taken), f"--out {taken}: is a file, not a folder"),
        "empty": ("", "--out needs a folder, got ''"),
        "proc": ("/proc/1", "--out /proc/1: cannot write files there: "),
        "below-a-file": (f"{taken}/x", f"--out {taken}/x: cannot write files there: Not a directory"),
        "train": ("/proc/1", "--out /proc/1: cannot write files there: "),
    }[case]
    # no such job, no cluster: the local folder is what is checked first
    args = ["train", str(REPO / "configs" / "own-script.yaml")] if case == "train" else ["fetch", "nojob"]
    line = one_error(*run(capsys, *args, "--out", out)[::2])
    assert line.startswith(expected), line
    assert taken.read_text() == "mine" and not (Path.cwd() / "metrics.json").exists()


# --- 6. simulate on a pathological trace -----------------------------------------------------------------------


def _one_second_lives(path: Path, nodes: int) -> Path:
    path.write_text(
        "time_ms,event,node\n" + "".join(f"{i * 1000},add,n{i}\n{i * 1000 + 1000},remove,n{i}\n" for i in range(nodes))
    )
    return path


def test_simulate_refuses_nodes_that_live_a_second_and_shows_the_parse(tmp_path, capsys):
    trace = _one_second_lives(tmp_path / "nodes.csv", 30_000)  # 60,001 lines: parsed with a progress line
    started = time.monotonic()
    code, _, err = run(capsys, "simulate", "--max-price", "3", "--offline", "--trace", str(trace), "--work", "1000")
    assert time.monotonic() - started < 60  # it ran past two minutes at 3.9 GB
    lines = err.splitlines()
    assert lines[0] == f"reading trace {trace}: 60,001 lines"
    assert one_error(code, "\n".join(lines[1:])) == (
        f"{trace}: its Spot nodes live 1 s on average, less than the 6.3 s a relaunch takes (--relaunch-time): "
        "no node would train before it is lost; check the trace's time unit (an events CSV's times are "
        "milliseconds)"
    )


def test_simulate_stops_a_run_on_course_for_endless_interruptions(tmp_path, capsys):
    """With the relaunch made shorter than the lives, the check above passes; the pace check stops the first
    policy that cannot finish (the whole cluster is never up at once to restart) within seconds. That policy
    is `deepvm`, whose runs go through the ladder's loop (simulation/market_run.py), not the engine: without
    a pace check of its own it ran on to the time limit, past pytest's 300 s."""
    trace = _one_second_lives(tmp_path / "nodes.csv", 2_000)
    code, _, err = run(
        capsys,
        "simulate",
        "--max-price",
        "3",
        "--offline",
        "--trace",
        str(trace),
        "--work",
        "100",
        "--relaunch-time",
        "0.5",
        "--restart-time",
        "0.5",
        "--runs",
        "20",
    )
    assert code == 3, err
    assert err.splitlines()[-1].startswith("deepvm: error: ")
    assert "would need more than 200,000 interruptions and replacements per run on this trace" in err


# --- 8. config set / unset repair an unreadable file ---------------------------------------------------------


BROKEN = {
    "yaml": lambda p: p.write_text("region: [us-east-1\n"),
    "not-utf8": lambda p: p.write_bytes(b"region: caf\xe9\n"),
    "not-a-mapping": lambda p: p.write_text("- region\n"),
    "fifo": lambda p: os.mkfifo(p),
    "directory": lambda p: p.mkdir(),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
@pytest.mark.parametrize("verb", ["set", "unset"])
def test_config_set_and_unset_repair_an_unreadable_file_and_keep_it(kind, verb, isolated_env, capsys):
    isolated_env.mkdir()
    config = isolated_env / "config.yaml"
    BROKEN[kind](config)
    before = os.lstat(config).st_mode
    args = ["config", "set", "region", "us-west-2"] if verb == "set" else ["config", "unset", "region"]
    code, _, err = run(capsys, *args)
    assert code == 0, err
    backup = isolated_env / "config.yaml.broken"
    assert os.lstat(backup).st_mode == before  # the very entry, moved: a FIFO is still one, nothing was read
    warning = " ".join(err.split())  # rich wraps the warning at the terminal's width
    assert warning.startswith("warning: ") and f"{config}" in warning
    assert f"; kept it as {backup} and wrote a new config.yaml" in warning
    assert config.read_text() == ("region: us-west-2\n" if verb == "set" else "")
    assert run(capsys, "config", "set", "cloud", "aws")[0] == 0 and not (isolated_env / "config.yaml.broken-2").exists()


def test_a_bad_value_leaves_the_unreadable_file_where_it_is(isolated_env, capsys):
    isolated_env.mkdir()
    config = isolated_env / "config.yaml"
    config.write_bytes(b"region: caf\xe9\n")
    line = one_error(*run(capsys, "config", "set", "max_price", "0")[::2])
    assert "max_price" in line and config.read_bytes() == b"region: caf\xe9\n"
    line = one_error(*run(capsys, "plan", "--offline")[::2])  # the message that read as cut off
    assert line == f"{config} is not UTF-8 text (byte 11); save the config file as UTF-8"


# --- 9. the screen at 80 columns --------------------------------------------------------------------------------


def _wide_progress(step: int, epoch: int | None) -> Progress:
    return Progress(
        step=step,
        total_steps=100_000,
        epoch=epoch,
        loss=12.3456,
        samples_per_s=123_456.7,
        world_size=128,
        cost_usd=1234.5678,
        synthetic=True,
    )


def test_train_progress_is_one_line_at_80_columns_without_an_epoch_for_a_script(monkeypatch):
    screen = Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None)
    monkeypatch.setattr(console, "err", screen)
    with reporters.live_reporter() as report:
        report.push("trainer-0123456789ab", 50, 100)
        for step in (10_000, 20_000, 30_000):
            report.progress(_wide_progress(step, None))
    lines = [line.rstrip() for line in _CURSOR.sub("", screen.file.getvalue()).splitlines() if line.strip()]
    assert max(len(line) for line in lines) <= 80
    details = [line for line in lines if line.startswith("  loss")]
    assert details and all("epoch" not in line and "$1234.5678" in line for line in details)
    assert any(line.startswith("train ") and "30000/100000" in line for line in lines)


def test_a_progress_line_drops_fields_by_width_not_loss_or_money():
    p = _wide_progress(10, 3)
    assert describe_progress(p) == (
        "epoch 3 · loss 12.3456 · 123,456.7 samples/s · 128 trainers · $1234.5678 · synthetic data"
    )
    assert describe_progress(p, 64) == "loss 12.3456 · 123,456.7 samples/s · 128 trainers · $1234.5678"
    assert describe_progress(p, 30) == "loss 12.3456 · $1234.5678"
    line = progress_line(p, "1h02m", width=80)  # `deepvm logs` on a terminal
    assert len(line) <= 80 and line.startswith("step 10/100000 · ") and line.endswith(" · eta 1h02m")


def test_market_says_which_columns_it_leaves_out(monkeypatch, capsys):
    monkeypatch.setattr(console, "out", Console(file=io.StringIO(), width=80, color_system=None))
    code, _, err = run(capsys, "market", "--gpu", "T4", "--offline")
    assert code == 0
    said = " ".join(err.split())
    assert "Gbps and FLOPP od left out at 80 columns: 110 show them, and --json has every field" in said


# --- 10. the trace formats, as the README documents them --------------------------------------------------------


def test_the_readme_trace_examples_read_as_it_says():
    text = (REPO / "README.md").read_text()
    section = text[text.index("### Trace files") :]
    section = section[: section.index("\n### ", 1)]
    blocks = re.findall(r"```\n(.*?)```", section, re.S)
    kinds = [parse_trace_bytes(block.encode(), "README", "README").kind.value for block in blocks]
    assert kinds == ["lifetimes", "events", "capacity"]


# --- with a cluster: 3 (a linked script runs), 4 (fetch of a cancelled job), 7 (no step), 9 (detach) -------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox boots namespaced sshd hosts and needs root")
NAME = f"own-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def cluster_home(tmp_path_factory):
    """DEEPVM_HOME holding one Single Anchor cluster (an on-demand anchor, a spot trainer); gone afterwards."""
    with sandbox_cluster(tmp_path_factory.mktemp("own-script"), NAME, make_plan(spot=1)) as env:
        yield Path(env["DEEPVM_HOME"])


@pytest.fixture
def home(cluster_home, monkeypatch):
    monkeypatch.setenv("DEEPVM_HOME", str(cluster_home))
    return cluster_home


def _job_state(capsys, job_id: str) -> dict:
    code, out, err = run(capsys, "jobs", NAME, "--json")
    assert code == 0, err
    return next(j for j in json.loads(out) if j["job_id"] == job_id)


@pytest.mark.sandbox
@needs_root
def test_a_linked_script_runs_detached_and_a_cancelled_job_says_what_it_left(home, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "job"
    (folder / "src").mkdir(parents=True)
    shutil.copy(REPO / "configs" / "own_train.py", folder / "src")
    (folder / "train.py").symlink_to("src/own_train.py")  # was silently not pushed: "no such file" on the head
    job = own_job(folder, steps=100_000)
    screen, stderr = Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None), console.err
    monkeypatch.setattr(console, "err", screen)  # a terminal of 80 columns
    code, _, err = run(capsys, "train", str(job), "--cluster", NAME, "--detach")
    monkeypatch.setattr(console, "err", stderr)
    assert code == 0, err
    shown = _CURSOR.sub("", screen.file.getvalue())
    assert shown.count("  follow it: deepvm logs ") == 1  # once, below the bars: not between two of their redraws
    assert shown.rindex("push ") < shown.index("  follow it: deepvm logs ")
    job_id = re.search(r"deepvm logs (\S+) -f", shown).group(1)
    try:
        _cancel_and_fetch(capsys, job, job_id, tmp_path / "fetched")
    finally:  # the cluster runs one job at a time: never leave this one to the next test
        main(["cancel", job_id, "--now"])
    assert f"  stop it: deepvm down {NAME}" in err.splitlines()  # the billing reminder's command whole, on a line


def _cancel_and_fetch(capsys, job: Path, job_id: str, out: Path) -> None:
    deadline = time.monotonic() + 240
    while _job_state(capsys, job_id)["step"] < 5:
        assert time.monotonic() < deadline, "the linked script did not train"
        time.sleep(0.5)  # a poll is one `jobs --json` (the head asked over SSH): a step is seen soon after
    assert run(capsys, "cancel", job_id)[0] == 0
    code, _, err = run(capsys, "fetch", job_id, "--out", str(out))  # was: `listing .../out failed: [Errno 2]`
    assert code == 0, err
    said = " ".join(err.split())
    state = _job_state(capsys, job_id)
    assert said.startswith(f"TensorBoard files of {job_id} in {out / 'tensorboard'}")  # its metrics, whatever its end
    assert f"job {job_id} cancelled at step {state['step']} of 100000" in said
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "stopped" and metrics["steps"] == state["step"]
    # the newest complete on the holder's disk: the step the head counted last, or, while the holder's disk
    # write of that one (asynchronous, DeepCheck's L2) was still going when the nodes were looked at, one before
    shown = re.search(r"newest checkpoint: step (\d+), on ", said)
    assert shown and 0 < int(shown[1]) <= state["checkpoint_step"], err
    assert f"~/deepvm/jobs/{job_id}/checkpoints/ckpt-" in said
    assert (
        f"a cancelled job is not resumed (`deepvm cancel` is final); to start it again from step 0: deepvm train "
        f"{job} --cluster {NAME}" in said
    )


@pytest.mark.sandbox
@needs_root
def test_a_script_that_never_steps_fails_its_job(home, tmp_path, capsys):
    """(A script whose spec says `run.calls_step: false` completes without a step: tests/training/test_userscript.py
    runs it for real, in-process, which costs no cluster time.)"""
    never = own_job(tmp_path / "never", steps=20)
    (never.parent / "train.py").write_text("from training import job\nctx = job.attach()\nctx.restore()\n")
    code, _, err = run(capsys, "train", str(never), "--cluster", NAME)
    assert code != 0  # it was `completed: step 0/20`, exit 0
    assert "train.py returned without calling ctx.step() (at step 0 of 20)" in err


@pytest.mark.sandbox
@needs_root
def test_a_script_that_hangs_before_its_first_step_is_stopped_after_its_startup_grace(home, tmp_path, capsys):
    """Point 1: it sat at step 0 for minutes with --stall-timeout 20, until a manual cancel (a fixed 900 s)."""
    stuck = own_job(tmp_path / "stuck", steps=20)
    (stuck.parent / "train.py").write_text(
        "import time\nfrom training import job\nctx = job.attach()\ntime.sleep(3600)  # a peer that never comes\n"
    )
    code, _, err = run(
        capsys, "train", str(stuck), "--cluster", NAME, "--stall-timeout", "600", "--startup-grace", "15"
    )
    said = " ".join(err.split())
    assert code != 0 and "no first step within the start-up grace of 15s (killed as hung" in said, err[-2000:]
    assert "the same failure in 2 attempts in a row, without a step: not retried" in said  # not a third bill


@pytest.mark.sandbox
@needs_root
def test_a_script_that_exits_3_at_once_is_tried_twice_and_says_its_own_error(home, tmp_path, capsys):
    """Point 2: three attempts with Open MPI's banner on screen each time, then a ~700-character line."""
    failing = own_job(tmp_path / "exit3", steps=20)
    (failing.parent / "train.py").write_text("import sys\nfrom training import job\nctx = job.attach()\nsys.exit(3)\n")
    code, _, err = run(capsys, "train", str(failing), "--cluster", NAME)
    assert code != 0
    assert re.search(r"attempt 1: rank \d on \S+ failed \(mpirun exit \d+\):", err), err[-2000:]
    assert "  deepvm rank: train.py exited with 3" in err and "attempt 3" not in err
    assert "MPI_ABORT" not in err and "help-mpi-api" not in err  # the banner stays in the job's log
    last = " ".join(err.split()).split("deepvm: error: ")[-1]
    assert last.startswith("train.py exited with 3 (rank ") and len(last) < 200, last
