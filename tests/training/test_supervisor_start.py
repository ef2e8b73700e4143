"""How `deepvm train` starts a managed job's supervisor on the head (training.control.head_start.start_script):
one command and one environment, two launchers picked on the head (systemd-run on AWS images, setsid
elsewhere).

The launch lines are expanded by a real bash, the way the head's login shell expands them, into the argv
and environment that systemd-run or setsid would get; a shell function in their place records them.
systemd-run itself never runs in any test: the sandbox's hosts have no systemd, so the setsid path is the
one the sandbox e2e runs (tests/cloud/test_managed_e2e.py). What no test exercises: that systemd accepts
the unit, runs it as the login user, restarts it 2 s after a failure and collects it, and that the head's
login user may `sudo -n` (all of it on AWS images only).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from training.control.head_start import detached_launch, start_script, supervisor_command, systemd_launch
from training.shared.layout import JobFiles

FILES = JobFiles("resnet-20261123-1")
PYTHON = "/opt/py 3/bin/python"  # a space, so that quoting shows
SERVICE_ENV = {"AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:5000/a b'c"}
ENV_NAMES = ["DEEPVM_HOME", "PYTHONPATH", *SERVICE_ENV]


def _script() -> str:
    return start_script(FILES, PYTHON, SERVICE_ENV)


def _expand(home: Path, stand_in: str, line: str) -> list[str]:
    """What the command named `stand_in` is called with when bash runs the script's export line, then `line`;
    the stand-in writes its argv, then the ENV_NAMES variables as it sees them, NUL-separated to out."""
    out = home / "out"
    record = f'{stand_in}() {{ printf "%s\\0" "$@" "--" >>"{out}"; printenv -0 {" ".join(ENV_NAMES)} >>"{out}"; }}'
    export = next(s for s in _script().splitlines() if s.startswith("export "))
    subprocess.run(
        ["bash", "-c", f"set -e\n{record}\n{export}\n{line}\nwait"],
        check=True,
        timeout=30,
        env={"HOME": str(home), "PATH": os.environ["PATH"]},
    )
    return out.read_text().split("\0")[:-1]


def _split(words: list[str]) -> tuple[list[str], dict[str, str]]:
    at = words.index("--")
    return words[:at], dict(zip(ENV_NAMES, words[at + 1 :]))


def test_the_script_runs_the_launchers_built_here():
    script = _script().splitlines()
    supervisor = supervisor_command(FILES, PYTHON)
    systemd = systemd_launch(f"deepvm-job-{FILES.job_id}", supervisor, ENV_NAMES)
    detached = detached_launch(supervisor, f'"$HOME/{FILES.root}"/supervisor.out')
    branch = script.index(next(s for s in script if s.startswith("if [ -d /run/systemd/system ]")))
    assert script[branch + 1 : branch + 5] == [f"  {systemd}", "else", f"  {detached}", "fi"]


def test_systemd_run_gets_the_exact_unit(tmp_path):
    line = systemd_launch(f"deepvm-job-{FILES.job_id}", supervisor_command(FILES, PYTHON), ENV_NAMES)
    argv, _ = _split(_expand(tmp_path, "sudo", line))
    home = str(tmp_path)
    assert argv == [
        "-n",
        "systemd-run",
        "--quiet",
        "--collect",
        f"--unit=deepvm-job-{FILES.job_id}",
        f"--uid={os.getuid()}",
        f"--gid={os.getgid()}",
        "-p",
        "Restart=on-failure",
        "-p",
        "RestartSec=2",
        f"--working-directory={home}",
        f"--setenv=DEEPVM_HOME={home}/deepvm/managed",
        f"--setenv=PYTHONPATH={home}/deepvm/runtime",
        "--setenv=AWS_DEFAULT_REGION=us-east-1",
        "--setenv=AWS_ENDPOINT_URL=http://127.0.0.1:5000/a b'c",
        PYTHON,
        "-m",
        "training.head.job_supervisor",
        f"{home}/deepvm/managed/jobs/{FILES.job_id}",
    ]


def test_both_launchers_run_the_same_command_with_the_same_environment(tmp_path):
    supervisor = supervisor_command(FILES, PYTHON)
    (tmp_path / "systemd").mkdir()
    systemd, _ = _split(_expand(tmp_path / "systemd", "sudo", systemd_launch("u", supervisor, ENV_NAMES)))
    (tmp_path / "setsid").mkdir()
    log = tmp_path / "setsid" / "supervisor.out"
    setsid, inherited = _split(_expand(tmp_path / "setsid", "setsid", detached_launch(supervisor, str(log))))
    assert log.exists()  # the detached launch appends its output there
    command = setsid[1:]  # after nohup
    assert setsid[0] == "nohup" and command[0] == PYTHON
    home = str(tmp_path / "systemd")
    assert systemd[-len(command) :] == [w.replace(str(tmp_path / "setsid"), home) for w in command]
    given = dict(w.removeprefix("--setenv=").split("=", 1) for w in systemd if w.startswith("--setenv="))
    assert given == {k: v.replace(str(tmp_path / "setsid"), home) for k, v in inherited.items()}
    assert inherited["AWS_ENDPOINT_URL"] == SERVICE_ENV["AWS_ENDPOINT_URL"]
