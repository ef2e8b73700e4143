"""A launched script's own checkpoint files on one node: which are kept, which are complete, and putting them back.

torchrun users rely on a shared filesystem: rank 0 writes `snapshot.pt`, and after a restart every rank loads
it. A Spot cluster has none, and the node that wrote the file may be the one taken away. So the trainer rank
that launched the script (training.node.launched) keeps the files the job names (`checkpoint.files`: paths,
directories or globs relative to the script's working directory) and everything under $DEEPVM_CHECKPOINT_DIR
through DeepCheck, and before every launch writes the newest complete copy of each back on every trainer.

A file is taken only once it is complete: it is read under a read lease, which Linux grants only while no
process holds the file open for writing and which holds back any writer's open until the read ends (torch.save,
like most writers, opens, writes and closes), so what is read is one whole version (_read_whole); and no
process of the script holds it open for writing just before or after (/proc/PID/fdinfo says how each
descriptor was opened: the check where a filesystem grants no leases). A file the script was still writing
when it was stopped is left out, so the version kept before it is what comes back: never a torn one. Files
are put back as a writer that must not tear them writes: a temporary file beside it, fsync, rename, fsync of
the directory, with the original's modification time (the age a user sees, and lost work counts from).

Keys are the file's path under its root, `job/REL` (the working directory) or `checkpoint_dir/REL`, so a
relaunch on another node, whose job directory sits elsewhere, puts each file at the same place.
"""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

JOB_ROOT, CHECKPOINT_ROOT = "job", "checkpoint_dir"
_TMP_SUFFIX = ".deepvm-tmp"  # a copy being put back


@dataclass(frozen=True)
class Stamp:
    """What says a file changed: its size and modification time."""

    size: int
    mtime_ns: int


@dataclass(frozen=True)
class FileCopy:
    """One complete version of a kept file."""

    key: str  # ROOT/REL
    stamp: Stamp
    data: bytearray | None  # as read or restored; None where another trainer holds it (training.node.kepttable)


class KeptFiles:
    """The kept files of one node's script: what changed since the last look, and putting copies back."""

    def __init__(self, workdir: Path, patterns: Iterable[str], checkpoint_dir: Path) -> None:
        self.roots = {JOB_ROOT: workdir, CHECKPOINT_ROOT: checkpoint_dir}
        self.patterns = tuple(patterns)
        self.kept: dict[str, Stamp] = {}  # the version of each file this node last kept or put back
        self._seen: dict[str, Stamp] = {}  # what the last look saw
        self._gone: list[str] = []  # what it no longer saw of the look before

    def path(self, key: str) -> Path:
        root, _, rel = key.partition("/")
        return self.roots[root] / rel

    def present(self) -> dict[str, Stamp]:
        """Every kept file there now, by key."""
        found: dict[str, Stamp] = {}
        for root, base in self.roots.items():
            candidates = [base] if root == CHECKPOINT_ROOT else [p for pat in self.patterns for p in base.glob(pat)]
            for path in candidates:
                for file in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
                    if file.is_symlink() or file.name.endswith(_TMP_SUFFIX):
                        continue  # a link is not the script's data (following one could leave the directory),
                        # nor a copy on its way back (put_back: the other trainers of a node share its directories)
                    st = file.stat()
                    found[f"{root}/{file.relative_to(base)}"] = Stamp(st.st_size, st.st_mtime_ns)
        return found

    def changed(self, writing: Callable[[], set[Path]]) -> list[FileCopy]:
        """Complete files that differ from the version kept last (see the module docstring). `writing` gives the
        paths some process of the script holds open for writing now (open_for_writing, a walk of /proc): asked only
        when a file changed, before its read, to skip a file being written; and again after the reads made
        without a lease, since a writer may open a file (and empty it: O_TRUNC) between the look at its size and
        the read, then write nothing yet, and the read and both looks agree (a lease holds that writer back)."""
        now = self.present()
        self._gone = sorted(set(self._seen) - set(now))  # were here at the last look: only this node's removals
        self._seen = now
        candidates = [(key, stamp) for key, stamp in sorted(now.items()) if self.kept.get(key) != stamp]
        if not candidates:
            return []  # the common tick: nothing changed, no walk of /proc
        busy = writing()
        read = [
            got
            for key, stamp in candidates
            if self.path(key) not in busy and (got := _read_whole(key, self.path(key), stamp)) is not None
        ]
        if all(leased for _, leased in read):
            return [copy for copy, _ in read]
        busy = writing()
        return [
            copy
            for copy, leased in read
            if leased or (self.path(copy.key) not in busy and _unchanged(self.path(copy.key), copy.stamp))
        ]

    def gone(self) -> list[str]:
        """Keys that were here at the look before the last one and are not now: the script on this node removed them
        (an old checkpoint). A file another node wrote was never here, so this node never says it is gone."""
        return self._gone

    def took(self, copies: Iterable[FileCopy], gone: Iterable[str] = ()) -> None:
        """These versions are kept now (or were put back): only a newer one is a change."""
        for copy in copies:
            self.kept[copy.key] = copy.stamp
        for key in gone:
            self.kept.pop(key, None)

    def put_back(self, copies: Iterable[FileCopy]) -> None:
        """Make the kept files here what `copies` are, as a shared filesystem would show them: each written at its
        place, whole or not at all, with its own modification time, and a kept file that is not among them removed
        (a file of a later name torn by the kill on a node that stays, a checkpoint removed elsewhere)."""
        done = {c.key: c for c in copies}
        for key in set(self.present()) - set(done):
            self.path(key).unlink(missing_ok=True)
        for copy in done.values():
            _write_whole(self.path(copy.key), copy)
        self.took(done.values())
        self._seen = {key: c.stamp for key, c in done.items()}


def _read_whole(key: str, path: Path, stamp: Stamp) -> tuple[FileCopy, bool] | None:
    """The file's bytes, and whether they were read under a lease, when no process held it open for writing while
    it was read (None when one did, when it changed, or when it went away).

    Under a read lease (fcntl F_SETLEASE, F_RDLCK; Linux's fcntl(2), "Leases"): the kernel grants it only while
    no process has the file open for writing, and holds back any open for writing (an O_TRUNC that would empty
    it too) until it is let go, so what is read is one whole version, and its size and time (fstat) are that
    version's. A writer that opens the file meanwhile waits for the read; the lease's break signal, SIGIO, is
    ignored (training.node.launched): the read lets go as soon as it ends. Where the filesystem grants no leases
    (NFS), the size and time before and after the read, and the open-for-writing checks around it (changed()),
    decide alone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # gone, or a link now
        return None
    try:
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
            leased = True
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EBUSY):
                return None  # open for writing now: not complete
            leased = False  # no leases here (EINVAL)
        try:
            st = os.fstat(fd)
            now = Stamp(st.st_size, st.st_mtime_ns)
            if not leased and now != stamp:
                return None
            data = bytearray(now.size)  # a bytearray, as every other trainer receives it: one layout for DeepCheck
            with os.fdopen(os.dup(fd), "rb", buffering=0) as handle:
                got, more = handle.readinto(data), handle.read(1)
        finally:
            if leased:
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    finally:
        os.close(fd)
    if got != now.size or more or (not leased and not _unchanged(path, now)):
        return None
    return FileCopy(key, now, data), leased


def _unchanged(path: Path, stamp: Stamp) -> bool:
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    return Stamp(st.st_size, st.st_mtime_ns) == stamp


def nobody_writing() -> set[Path]:
    """changed()'s `writing` once the script has exited: no process of it holds a file."""
    return set()


def _write_whole(path: Path, copy: FileCopy) -> None:
    assert copy.data is not None, f"{copy.key}: put back without its bytes"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=_TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(copy.data)
            handle.flush()
            os.fsync(handle.fileno())
        os.utime(tmp, ns=(copy.stamp.mtime_ns, copy.stamp.mtime_ns))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def open_for_writing(session: int) -> set[Path]:
    """The files some process of session `session` (the launched script and its children) holds open for
    writing, from /proc: a descriptor's fdinfo `flags` carry its access mode (O_WRONLY 1, O_RDWR 2)."""
    paths: set[Path] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getsid(int(proc.name)) != session:
                continue
            for fd in (proc / "fd").iterdir():
                flags = _fd_flags(proc / "fdinfo" / fd.name)
                if flags is not None and flags & 0o3:
                    target = os.readlink(fd)
                    if target.startswith("/"):
                        paths.add(Path(target))
        except (OSError, ValueError):  # the process or descriptor went away meanwhile
            continue
    return paths


def _fd_flags(fdinfo: Path) -> int | None:
    for line in fdinfo.read_text().splitlines():
        if line.startswith("flags:"):
            return int(line.split()[1], 8)
    return None
