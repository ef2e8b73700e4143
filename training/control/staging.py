"""Getting nodes ready for a launch: the deepvm runtime and the job pushed, setup run once, notices read.

Layout on every node, relative to the login user's home (where SFTP starts):

    deepvm/runtime/               training/, deepcheck/ and provisioning/: what ranks and the head's controller import
    deepvm/setup/KEY.done         marks that the setup commands of this key (setup_key) ran on this node
    deepvm/envs/KEY/              the Python environment they install into ($DEEPVM_PIP), over deepvm's (jobenv)
    deepvm/warm/KEY.sock, .lock   the node's warm server (training.node.warm), which preparing it starts; .lock: its pid
    deepvm/jobs/JOB_ID/job/       the job directory (the YAML and whatever sits beside it)
    deepvm/jobs/JOB_ID/out/       trainer 0 writes model.pt, state.pt and metrics.json here
    deepvm/jobs/JOB_ID/checkpoints/   DeepCheck's L2 directory on holder nodes
    deepvm/jobs/JOB_ID/env        a link to the job's environment in deepvm/envs/, whose packages its ranks import
    deepvm/jobs/JOB_ID/hostfile, known_hosts   the current launch's, on the head node only
    deepvm/ssh/id_ed25519         the cluster-internal private key, on the head node only

Pushes are incremental (transport.push_tree compares content hashes), so preparing a node again costs
one manifest read; setup runs once per node, set of commands and interpreter, whatever the number of launches
or jobs, with `$DEEPVM_PYTHON` and `$DEEPVM_PIP` of the job's environment (training.node.jobenv: the one those
commands made, so two jobs of one setup share it, as they share the setup's marker); and
each prepared spot node reports whether an interruption notice is already posted, so a node that was
noticed between two runs is never launched on. Preparing also checks that the node's Python has what
ranks import, so a missing package is one clear error, not a job that crashes on every relaunch.

mpirun runs on a head node (see launcher) and logs in to every node, itself included, with the cluster's
internal key: preparing a node authorises that key's public half there (once), so a replacement node
is reachable from the head as soon as it is prepared. The head gets the private half, the launch's
hostfile and a known_hosts file pinning every node's host key at each launch (prepare_head), since
which node is the head and which nodes take part can change between launches.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import deepcheck
import provisioning
import training
from provisioning.cloud.ssh import TransportError
from provisioning.cloud.types import HostSpec
from provisioning.core.errors import InputError
from training.shared.events import Notice
from training.shared.transport import (
    OutputLine,
    PushProgress,
    push_tree,
    run_command,
    run_on_hosts,
    write_files,
)

RUNTIME_DIR = "deepvm/runtime"
WARM_DIR = "deepvm/warm"  # the node's warm server's socket (training.node.warm): ranks start as its forks
INTERNAL_KEY = "deepvm/ssh/id_ed25519"
# ranks import training and deepcheck; the managed controller on the head also runs provisioning (its
# state store, the cloud provider), so the runtime carries all three
_PACKAGES = tuple(Path(p.__file__).parent for p in (training, deepcheck, provisioning))
_MARK = "@@deepvm "
_NEEDED = ["torch", "mpi4py", "yaml", "pydantic"]  # what ranks import beyond the runtime itself
_LAST_LINES = 3  # of a node's output, in the error when preparing it failed


@dataclass(frozen=True)
class JobPaths:
    """Where one job lives on a node (absolute, once the node's home is known)."""

    home: str
    job_id: str

    @property
    def root(self) -> str:
        return f"{self.home}/deepvm/jobs/{self.job_id}"

    @property
    def runtime(self) -> str:
        return f"{self.home}/{RUNTIME_DIR}"

    @property
    def job(self) -> str:
        return f"{self.root}/job"

    @property
    def out(self) -> str:
        return f"{self.root}/out"

    @property
    def checkpoints(self) -> str:
        return f"{self.root}/checkpoints"

    @property
    def env(self) -> str:
        return f"{self.root}/env"

    @property
    def hostfile(self) -> str:
        return f"{self.root}/hostfile"

    @property
    def known_hosts(self) -> str:
        return f"{self.root}/known_hosts"

    @property
    def internal_key(self) -> str:
        return f"{self.home}/{INTERNAL_KEY}"


@dataclass(frozen=True)
class NodeState:
    """What preparing one node found."""

    home: str  # the login user's home directory
    notice: Notice | None  # the interruption notice posted to the node, if any


@dataclass(frozen=True)
class JobToStage:
    """What preparing a node pushes there and runs for one job."""

    runtime_dir: Path  # deepvm's code for the nodes (stage_runtime)
    job_dir: Path  # the job's directory on this machine: its YAML and whatever sits beside it
    job_id: str
    setup: tuple[str, ...]  # the job's setup commands, run once per node
    env: dict[str, str]  # exported while they run
    python: str  # the nodes' interpreter, checked for what ranks import
    authorize: str  # the cluster-internal public key: how the head logs in to the node


def stage_runtime(target: Path) -> Path:
    """Copy deepvm's code for the nodes into `target` (emptied first), ready to push."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in _PACKAGES:
        shutil.copytree(package, target / package.name, ignore=ignore)
    return target


def setup_key(commands: Sequence[str], python: str) -> str:
    """What a node keeps a setup's marker and environment under: its commands and the interpreter they set up
    (the same commands for another Python are another setup, into another environment)."""
    return hashlib.sha256(json.dumps([list(commands), python]).encode()).hexdigest()[:16]


def setup_marker(commands: Sequence[str], python: str) -> str:
    return f"deepvm/setup/{setup_key(commands, python)}.done"


def _notice_lines(python: str) -> list[str]:
    py = shlex.quote(python)
    return [
        f"notice=$(PYTHONPATH={RUNTIME_DIR} {py} -m training.node.watcher --once)",
        f'echo "{_MARK}notice $notice"',
    ]


def prepare_command(job_id: str, setup: Sequence[str], python: str, check_notice: bool, authorize: str) -> str:
    """One shell script per node: make the job's directories, authorise the public key `authorize` (once),
    make the job's environment, run setup once, check the Python, start the warm server, report home (and
    notice)."""
    root = f"deepvm/jobs/{job_id}"
    key = setup_key(setup, python)
    env = f"deepvm/envs/{key}"
    job_python = f"$HOME/{env}/bin/python"  # where it is, not through the job's link: pip's shebangs name it
    lines = [
        "set -e",
        f"mkdir -p {root}/out {root}/checkpoints deepvm/setup",
        *authorize_lines(authorize),
        f'echo "{_MARK}home $HOME"',
        f"PYTHONPATH={RUNTIME_DIR} {shlex.quote(python)} -m training.node.jobenv {env}",
        f"ln -sfn ../../envs/{key} {root}/env",
        f'export DEEPVM_PYTHON="{job_python}" DEEPVM_PIP="{job_python} -m pip"',
    ]
    if setup:
        lines += _setup_lines(setup, f"{root}/job", setup_marker(setup, python))
    # a missing package fails here, not in a crash loop; find_spec does not import (torch takes seconds)
    check = f"import importlib.util as u; [u.find_spec(m) or exit(m + ' is missing') for m in {_NEEDED!r}]"
    lines.append(f'{shlex.quote(python)} -c "{check}"')
    lines.append(warm_server_line(python))
    if check_notice:
        lines += _notice_lines(python)
    return "\n".join(lines)


def _setup_lines(setup: Sequence[str], cwd: str, marker: str) -> list[str]:
    """Run `setup` in `cwd` unless `marker` exists, each line under `set -e`: the first failing line ends it, and
    the script, with that line's status. Marked done only when every line succeeded, so a retry runs it again.

    Why so: `set -e` is ignored inside a command whose status is tested (`(...) && touch marker` ran every line
    and marked a failed setup done), so the subshell runs on its own. Each line says its number before it runs
    (`@@deepvm setup-line N`), and a failure its status (`@@deepvm setup-failed STATUS`), for prepare_nodes'
    error; `eval` parses each line alone, so a line that does not parse fails as itself, not the whole script."""
    body = [f"cd {cwd}"]
    for number, line in enumerate(setup, 1):
        body += [f'echo "{_MARK}setup-line {number}"', f"eval {shlex.quote(line)}"]
    return [
        f"if [ ! -e {marker} ]; then",
        "set +e",
        "(set -e",
        *body,
        ")",
        "status=$?",
        "set -e",
        f'if [ "$status" != 0 ]; then echo "{_MARK}setup-failed $status"; exit "$status"; fi',
        f"touch {marker}",
        "fi",
    ]


def warm_server_line(python: str) -> str:
    """Start the node's warm server in the background (training.node.warm: it imports torch once for every
    rank the node starts from now on; one already running for this Python and torch stays, the new one
    leaves). From this SSH session, not from a rank: mpirun's guard ends all an attempt started."""
    serve = f'PYTHONPATH="$HOME/{RUNTIME_DIR}" {shlex.quote(python)} -m training.node.warm --serve "$HOME/{WARM_DIR}"'
    return f"({serve} </dev/null >/dev/null 2>&1 &)"


def authorize_lines(public_key: str) -> list[str]:
    """Shell lines that authorise `public_key` for the login user, once (running them again adds nothing)."""
    key = shlex.quote(public_key)
    return [
        'mkdir -p "$HOME/.ssh" && chmod 700 "$HOME/.ssh"',
        f'grep -qxF {key} "$HOME/.ssh/authorized_keys" 2>/dev/null || echo {key} >> "$HOME/.ssh/authorized_keys"',
    ]


def _run_marked(
    hosts: Sequence[HostSpec],
    command: Callable[[HostSpec], str],
    on_line: Callable[[OutputLine], None],
    env: dict[str, str] | None = None,
) -> tuple[dict[str, int], dict[str, dict[str, str]]]:
    """Run each host's command in parallel; exit codes, and the `@@deepvm KEY VALUE` lines by host.
    Other output goes to on_line."""
    found: dict[str, dict[str, str]] = {h.name: {} for h in hosts}

    def collect(line: OutputLine) -> None:
        if line.stream == "stdout" and line.text.startswith(_MARK):
            key, _, value = line.text[len(_MARK) :].partition(" ")
            found[line.host][key] = value
        else:
            on_line(line)

    codes: dict[str, int] = {}
    for text in dict.fromkeys(command(h) for h in hosts):  # one parallel round per distinct command
        group = [h for h in hosts if command(h) == text]
        codes.update(run_on_hosts(group, text, collect, env=env))
    return codes, found


def prepare_nodes(
    hosts: Sequence[HostSpec],
    spot: set[str],
    job: JobToStage,
    on_push: Callable[[PushProgress], None],
    on_line: Callable[[OutputLine], None],
) -> dict[str, NodeState]:
    """Push, set up and check every host in parallel; {host name: NodeState}. `spot` names the hosts
    whose notices are read. Setup output is streamed through on_line; a failing setup is an error."""
    push_tree(hosts, job.runtime_dir, RUNTIME_DIR, progress=on_push)
    push_tree(hosts, job.job_dir, f"deepvm/jobs/{job.job_id}/job", progress=on_push)
    python = job.python
    recent: dict[str, deque[str]] = {h.name: deque(maxlen=_LAST_LINES) for h in hosts}

    def keep(line: OutputLine) -> None:
        recent[line.host].append(line.text)
        on_line(line)

    codes, found = _run_marked(
        hosts,
        lambda h: prepare_command(job.job_id, job.setup, python, check_notice=h.name in spot, authorize=job.authorize),
        keep,
        job.env,
    )
    failed = sorted(name for name, code in codes.items() if code != 0)
    if failed:
        name = failed[0]
        where = next(h.where for h in hosts if h.name == name)
        more = f" (and {len(failed) - 1} more nodes)" if len(failed) > 1 else ""
        last = f"its last output: {' | '.join(recent[name])}" if recent[name] else "it printed nothing"
        values = found[name]
        if "setup-failed" in values and values.get("setup-line", "").isdigit():  # else it failed before its first line
            number = int(values["setup-line"])
            raise InputError(
                f"preparing {where} failed: its setup line {number} ({_one_line(job.setup[number - 1])}) exited "
                f"with status {values['setup-failed']}; {last}{more}"
            )
        raise InputError(
            f"preparing {where} failed (exit {codes[name]}): {last}; the Python at {python!r} needs torch, "
            f"mpi4py, pyyaml and pydantic{more}"
        )
    states = {}
    for host in hosts:
        values = found[host.name]
        if "home" not in values:
            raise TransportError(f"{host.where}: the node did not report its home directory")
        states[host.name] = NodeState(values["home"], _notice(values))
    return states


MPIRUN = "mpirun"
# Open MPI installs that a non-interactive SSH command has no PATH to: AWS's Deep Learning AMIs and the EFA
# installer put Open MPI here and add it to PATH only for login shells.
OPEN_MPI_HOMES = ("/opt/amazon/openmpi",)
_HOME_MARK = "open-mpi-home="


def prepare_head(
    head: HostSpec, paths: JobPaths, internal_key: Path, files: Mapping[str, str], find_mpirun: bool = True
) -> str | None:
    """Make `head` ready to run mpirun for a launch: the cluster-internal private key (0600; no other node
    gets it), the launch's `files` ({path on the head: text}: hostfile, known_hosts) and mpirun itself.

    Returns None when mpirun is on the head's PATH, else the Open MPI installation it was found in
    (OPEN_MPI_HOMES), which mpirun must then be given as --prefix so that its daemons on the other nodes
    find their programs and libraries too. Without `find_mpirun` (it was found on this head before) only
    the files are written, and None returned."""
    write_files(head, {paths.internal_key: internal_key.read_bytes(), **{p: t.encode() for p, t in files.items()}})
    if not find_mpirun:
        return None
    probe = [f"command -v {MPIRUN} >/dev/null && exit 0"]
    for home in map(shlex.quote, OPEN_MPI_HOMES):
        probe.append(f"if [ -x {home}/bin/{MPIRUN} ]; then echo {_HOME_MARK}{home}; exit 0; fi")
    said: list[str] = []
    if run_command(head, "\n".join([*probe, "exit 1"]), lambda line: said.append(line.text.strip())) != 0:
        raise InputError(
            f"the head node {head.where} has no `mpirun` on its PATH or in {', '.join(OPEN_MPI_HOMES)}: mpirun "
            "runs there, so the nodes need Open MPI (e.g. `apt-get install -y openmpi-bin` in the job's setup, "
            "or an image that has it)"
        )
    return next((line.removeprefix(_HOME_MARK) for line in said if line.startswith(_HOME_MARK)), None)


def read_notices(
    hosts: Sequence[HostSpec], python: str, on_line: Callable[[OutputLine], None]
) -> dict[str, Notice | None]:
    """The interruption notice posted to each (already prepared) host, or None."""
    codes, found = _run_marked(hosts, lambda h: "set -e\n" + "\n".join(_notice_lines(python)), on_line)
    bad = [h.where for h in hosts if codes[h.name] != 0]
    if bad:
        raise TransportError(f"{bad[0]}: reading its instance metadata failed")
    return {h.name: _notice(found[h.name]) for h in hosts}


def _one_line(command: str) -> str:
    """A setup command as an error line names it: its first line, cut at 80 characters."""
    lines = command.strip().splitlines() or [""]
    text = lines[0] + (" ..." if len(lines) > 1 else "")
    return text if len(text) <= 80 else text[:76] + " ..."


def _notice(values: dict[str, str]) -> Notice | None:
    """The notice `python -m training.node.watcher --once` printed (its fields as JSON, or null), if any."""
    text = values.get("notice", "")
    fields = json.loads(text) if text else None
    return None if fields is None else Notice(**fields)
