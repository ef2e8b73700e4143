"""Starting a managed job's supervisor on a head node: the one script `deepvm train` runs on the head it
submits to (training.client.managed.submit), and the one a head that hands control of a moved cluster over runs
on the new head (training/control/handover.py, step 4); and the cluster's idle watch (`up --autodown`), which
a hand-over moves too.

Here, in control, because both the user's side and the head start it, and neither may import the other.
"""

from __future__ import annotations

import shlex

from training.control.staging import RUNTIME_DIR
from training.shared.layout import MANAGED_HOME, WATCH_DIR, JobFiles

_CONTROLLER_NEEDS = ("boto3", "paramiko", "pydantic", "yaml")  # what the controller imports beyond the runtime
# what every deepvm program on the head runs with (shell words, expanded by the head's login shell)
_HEAD_ENV = {"DEEPVM_HOME": f'"$HOME/{MANAGED_HOME}"', "PYTHONPATH": f'"$HOME/{RUNTIME_DIR}"'}


def head_exports(service_env: dict[str, str]) -> str:
    """The shell line a deepvm program on the head starts after: its home, its runtime, and what its AWS
    clients need (service_env: never keys)."""
    return _export({**_HEAD_ENV, **{name: shlex.quote(value) for name, value in service_env.items()}})


def _export(env: dict[str, str]) -> str:
    """The shell line that exports `env` (its values are shell words already)."""
    return "export " + " ".join(f"{name}={value}" for name, value in env.items())


HEAD_ENV = _export(_HEAD_ENV)  # the exports of a program on the head that needs no AWS client


def start_script(files: JobFiles, python: str, service_env: dict[str, str]) -> str:
    """The script that starts the job's supervisor on the head, detached from this SSH session, and returns
    once it runs. One command (supervisor_command), one environment (the script's exports), two launchers,
    picked on the head: a transient systemd service that systemd restarts if it fails where the head runs
    systemd and the login user may sudo (AWS images: systemd_launch), else setsid (the sandbox's hosts:
    detached_launch). Only the setsid path runs in the sandbox; tests/training/test_supervisor_start.py
    pins the argv systemd-run gets, but nothing here has run it."""
    py = shlex.quote(python)
    exports = {**_HEAD_ENV, **{name: shlex.quote(value) for name, value in service_env.items()}}
    supervisor = supervisor_command(files, python)
    root = f'"$HOME/{files.root}"'
    needs = f"import importlib.util as u; [u.find_spec(m) or exit(m) for m in {list(_CONTROLLER_NEEDS)!r}]"
    lacking = (
        "the head's Python lacks $missing, which the job's controller needs there: install it in the "
        "image, or train with --controller local"
    )
    return "\n".join(
        [
            "set -e",
            _export(exports),
            f'missing=$({py} -c "{needs}" 2>&1) || {{ echo "{lacking}" >&2; exit 1; }}',
            "if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null && sudo -n true 2>/dev/null; then",
            "  " + systemd_launch(f"deepvm-job-{files.job_id}", supervisor, list(exports)),
            "else",
            "  " + detached_launch(supervisor, f"{root}/supervisor.out"),
            "fi",
            # return once the supervisor runs (it writes its pid first), so that a follower never mistakes a
            # job whose supervisor is still starting for one that is over
            f"for _ in $(seq 300); do [ -e {root}/supervisor.pid ] && exit 0; sleep 0.1; done",
            f'echo "the job\'s supervisor did not start on the head:" >&2; tail -5 {root}/supervisor.out >&2; exit 1',
        ]
    )


def supervisor_command(files: JobFiles, python: str) -> str:
    """The head's command line (for its login shell) that runs the job's supervisor, whichever launcher
    starts it: built once, so that the systemd path runs exactly what the sandbox's setsid path runs."""
    return f'{shlex.quote(python)} -m training.head.job_supervisor "$HOME/{files.root}"'


def systemd_launch(unit: str, command: str, env_names: list[str]) -> str:
    """`command` as a transient systemd service (AWS images): run as the login user in its home, restarted
    2 s after a failure, collected when it ends; it gets the named variables of the launching shell (sudo
    and systemd pass on no environment of their own accord)."""
    setenv = " ".join(f'--setenv={name}="${name}"' for name in env_names)
    return (
        f'sudo -n systemd-run --quiet --collect --unit={shlex.quote(unit)} --uid="$(id -u)" '
        f'--gid="$(id -g)" -p Restart=on-failure -p RestartSec=2 --working-directory="$HOME" {setenv} {command}'
    )


def detached_launch(command: str, log: str) -> str:
    """`command` detached from the SSH session (no systemd, as on the sandbox's hosts): its own session,
    stdin closed, output appended to `log`. Nothing restarts this process; it restarts the service."""
    return f"setsid nohup {command} </dev/null >>{log} 2>&1 &"


def idle_watch_script(python: str, service_env: dict[str, str]) -> str:
    """The script that (re)starts the cluster's idle watch (`up --autodown`: training/head/idle_cluster.py) on a
    head whose WATCH_DIR holds its watch.json, detached, and returns once it runs: a watch started earlier there
    is stopped first, so that the newest record applies. `up --autodown` runs it on the head, and a head that
    hands control over on the new head (training/control/handover.py)."""
    root = f'"$HOME/{WATCH_DIR}"'
    command = f"{shlex.quote(python)} -m training.head.idle_cluster {root}"
    return "\n".join(
        [
            "set -e",
            head_exports(service_env),
            f"old=$(cat {root}/watch.pid 2>/dev/null || true)",
            '[ -n "$old" ] && grep -q training.head.idle_cluster /proc/$old/cmdline 2>/dev/null && kill "$old" || true',
            f"rm -f {root}/watch.pid",
            detached_launch(command, f"{root}/watch.out"),
            f"for _ in $(seq 100); do [ -e {root}/watch.pid ] && exit 0; sleep 0.1; done",
            f'echo "the idle watch did not start on the head:" >&2; tail -5 {root}/watch.out >&2; exit 1',
        ]
    )
