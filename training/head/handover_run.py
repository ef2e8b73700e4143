"""The old head's side of handing control of a moved cluster to a new head (training/control/handover.py, steps
2 to 4), as the controller's HeadHandOver on the head (training.head.job_service gives it to the controller).

In order: the state is staged here (`stage_state`: a consistent copy of the head's state store, the job's root
with its job.json naming the new head and the old one; the cluster's keys apart, written 0600), pushed to the
new head over SSH with the cluster's internal key, the new head is given the controller's instance profile,
and the job's supervisor is started there (training.control.head_start: the script `deepvm train` runs), which
returns once it runs; then the job's root here is marked (HANDED_OVER_MARK), so that a service of this head
restarted after a crash never runs the job beside the new head's, and the cluster's idle watch (`up --autodown`),
if it has one, is started there too: after the job's supervisor, since a watch with no job beside it would take
the cluster down; a watch that does not start is said, not undone (this head's own ends with it). Each act on
the new head is one of `HandOverHands`, so that a test plays the sequence with no SSH and no cloud;
`cloud_hands` are the real ones.

A step that fails raises HandOverFailed after undoing what was done: the new head gets back the profile it had
(the holders', or its launch template's); files pushed there are left (no process reads them, and a later push
replaces them). The old head keeps control.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from provisioning.cloud.aws.context import AwsContext
from provisioning.cloud.aws.profiles import attach_profile, instance_profiles
from provisioning.cloud.ssh import TransportError
from provisioning.cloud.types import HostSpec
from provisioning.clusters.handle import Cluster
from provisioning.core.errors import DeepvmError
from training.control.handover import HandOverFailed, Successor
from training.control.head_start import idle_watch_script, start_script
from training.shared.layout import END_MARK, HANDED_OVER_MARK, MANAGED_HOME, WATCH_DIR, WATCH_RECORD, JobFiles
from training.shared.records import HeadJob
from training.shared.transport import OutputLine, push_tree, run_command, write_files

STATE_DB = "state.db"
_WATCH = WATCH_DIR.removeprefix(f"{MANAGED_HOME}/")  # its directory in a managed home
# what stays with the old head: its processes' pid files and output, and the mark of a job's end
_STAYS = ("supervisor.pid", "service.pid", "service.out", "supervisor.out", END_MARK, HANDED_OVER_MARK)
_FAILS = (DeepvmError, OSError, sqlite3.Error, BotoCoreError, ClientError)
_T = TypeVar("_T")


@dataclass(frozen=True)
class HandOverHands:
    """What a hand-over does to the new head, each a seam a test replaces."""

    push: Callable[[HostSpec, Path, dict[str, bytes]], None]  # a staged managed home, and key files (0600) by path
    run: Callable[[HostSpec, str], None]  # a script there; DeepvmError when it fails
    profile_of: Callable[[str], str | None]  # the instance profile an instance holds now (its ARN; None: none)
    set_profile: Callable[[str, str], None]  # give an instance a profile (a name or an ARN)


def stage_state(home: Path, job: HeadJob, to: Successor, into: Path) -> dict[str, bytes]:
    """Lay out in `into` what the new head's managed home needs but the keys (training/control/handover.py, step
    2); the cluster's key files, by their path on the new head (relative to its login user's home)."""
    with (
        contextlib.closing(sqlite3.connect(home / STATE_DB)) as source,
        contextlib.closing(sqlite3.connect(into / STATE_DB)) as copy,
    ):
        source.backup(copy)  # a consistent copy while other readers (`deepvm status` asking) read on
    root = into / "jobs" / job.job_id
    shutil.copytree(home / "jobs" / job.job_id, root, ignore=shutil.ignore_patterns(*_STAYS))
    (root / "job.json").write_text(replace(job, head=to.new.instance_id, handed_from=to.old).to_json())
    watch = home / _WATCH / WATCH_RECORD
    if watch.is_file():  # `up --autodown`'s idle watch moves with the head
        (into / _WATCH).mkdir()
        shutil.copy(watch, into / _WATCH / WATCH_RECORD)
    keys = home / "clusters" / job.cluster.name
    return {
        f"{MANAGED_HOME}/{path.relative_to(home).as_posix()}": path.read_bytes()
        for path in sorted(keys.rglob("*"))
        if path.is_file()
    }


class HandOverRun:
    """The HeadHandOver of a managed job's head (module docstring)."""

    def __init__(
        self, home: Path, job: HeadJob, profile: str, host_of: Callable[[str], HostSpec], hands: HandOverHands
    ) -> None:
        self.home, self.job, self.profile, self.host_of, self.hands = home, job, profile, host_of, hands

    def __call__(self, to: Successor, note: Callable[[str], None]) -> None:
        new = to.new.instance_id
        host = _step(f"logging in to {new}", lambda: self.host_of(new))
        with tempfile.TemporaryDirectory(prefix="deepvm-handover-") as work:
            keys = _step("staging the job's state", lambda: stage_state(self.home, self.job, to, Path(work)))
            _step(f"copying the job's state to {new}", lambda: self.hands.push(host, Path(work), keys))
        had = _step(f"reading {new}'s instance profile", lambda: self.hands.profile_of(new))
        _step(f"giving {new} the controller's instance profile", lambda: self.hands.set_profile(new, self.profile))
        script = start_script(JobFiles(self.job.job_id), self.job.python, self.job.service_env)
        try:
            _step(f"starting the job's controller on {new}", lambda: self.hands.run(host, script))
        except HandOverFailed:
            if had is not None:  # it keeps no rights it was given for nothing
                with contextlib.suppress(*_FAILS):
                    self.hands.set_profile(new, had)
            raise
        # a service of this head restarted from here on must not run the job beside the new head's
        (self.home / "jobs" / self.job.job_id / HANDED_OVER_MARK).write_text(f"{to.old} {new}")
        note(f"control passed to {to.describe()}: the job's controller runs there from now on")
        if (self.home / _WATCH / WATCH_RECORD).is_file():  # after the job's: alone, it would count no job there
            watch = idle_watch_script(self.job.python, self.job.service_env)
            try:
                self.hands.run(host, watch)
            except _FAILS as exc:  # the job runs there already: said, not undone
                note(f"the cluster's idle watch did not start on {new} ({exc}); `deepvm up --autodown N` restarts it")


def head_handover(home: Path, job: HeadJob, cluster: Cluster) -> HandOverRun | None:
    """The hand-over of the job's head (`home`: its managed home), or None where it has no controller profile to
    hand on or no cloud to ask: the head then stays the control node (training/control/move.py)."""
    row = cluster.row
    ctx = cluster.target.context(row.region, start=False)
    profile = row.resources.controller.profile
    if ctx is None or not profile:
        return None

    def host_of(instance_id: str) -> HostSpec:
        found = next((e.host for e in cluster.endpoints() if e.instance_id == instance_id), None)
        if found is None:
            raise TransportError(f"{instance_id} is not a running node of cluster {cluster.name}")
        return found

    return HandOverRun(home, job, profile, host_of, cloud_hands(ctx))


def _step(what: str, act: Callable[[], _T]) -> _T:
    """One step of the hand-over; HandOverFailed saying which, when it fails."""
    try:
        return act()
    except _FAILS as exc:
        raise HandOverFailed(f"{what}: {exc}") from exc


def cloud_hands(ctx: AwsContext) -> HandOverHands:
    """The real hands: SSH with the cluster's internal key (the hosts say which), the head's role in EC2."""

    def push(host: HostSpec, staged: Path, keys: dict[str, bytes]) -> None:
        write_files(host, keys)  # 0600 from their first byte: the internal key among them
        push_tree([host], staged, MANAGED_HOME)

    def run(host: HostSpec, script: str) -> None:
        said: list[str] = []
        code = run_command(host, script, lambda line: said.append(line.text) if _on_stderr(line) else None)
        if code != 0:
            raise TransportError(f"{host.where}: {said[-1] if said else f'exit {code}'}")

    return HandOverHands(
        push,
        run,
        lambda iid: instance_profiles(ctx, [iid]).get(iid),
        lambda iid, profile: attach_profile(ctx, profile, iid),
    )


def _on_stderr(line: OutputLine) -> bool:
    return line.stream == "stderr"
