"""SSH to the cluster's nodes: push a directory tree over SFTP and run commands with streamed output.

Every connection is provisioning.cloud.ssh.connect's, whose host keys are pinned: an unknown or different
key is refused, and nothing is ever added to known_hosts, so a spoofed node address cannot receive the job.

Pushes are incremental: the remote directory keeps ``.deepvm-manifest.json`` with the SHA-256 and mode
of every file deepvm put there; a push sends only files whose entry differs, removes files it sent
before that are gone locally, and rewrites the manifest last. Each file is written under a temporary
name and renamed, so an interrupted push leaves whole old files or whole new ones, and, as the
manifest was not yet updated, the next push sends whatever is unconfirmed again.

Small files (a private key, a hostfile) go with write_files; results come back with fetch_files (the
final model and metrics) or fetch_tree (a whole out directory). Functions that take several hosts work
on them in parallel threads; callbacks are called from those threads, one call at a time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import posixpath
import re
import shlex
import socket
import stat
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

import paramiko

from provisioning.cloud.ssh import TransportError, connect
from provisioning.cloud.types import HostSpec
from training.shared.jobdir import DEFAULT_EXCLUDE, pushed_files

T = TypeVar("T")
R = TypeVar("R")

MANIFEST = ".deepvm-manifest.json"


@dataclass(frozen=True)
class PushProgress:
    """One step of a push to one host: after each block of a file and once per finished file."""

    host: str
    path: str  # the file being sent, relative to the pushed directory
    files_done: int
    files_total: int  # files this push sends to this host (unchanged ones are not counted)
    bytes_done: int
    bytes_total: int


@dataclass(frozen=True)
class PushResult:
    """What a push did on one host."""

    host: str
    uploaded: tuple[str, ...]  # relative paths sent, sorted
    deleted: tuple[str, ...]  # relative paths removed because they are gone locally
    unchanged: int  # files the manifest showed already up to date
    bytes_sent: int


@dataclass(frozen=True)
class OutputLine:
    """One line a remote command wrote."""

    host: str
    stream: Literal["stdout", "stderr"]
    text: str  # without the line ending

    def prefixed(self) -> str:
        return f"[{self.host}] {self.text}"


# --- push -----------------------------------------------------------------------------------------


def local_manifest(root: Path, exclude: Sequence[str] = DEFAULT_EXCLUDE) -> dict[str, dict[str, str | int]]:
    """{relative posix path: {"sha256", "mode"}} of every file under ``root`` that goes (jobdir.pushed_files:
    regular files, a link to one inside ``root`` as that file; InputError for any other link).

    A pattern excludes a file when it matches any component of its relative path.
    """
    entries: dict[str, dict[str, str | int]] = {}
    for relative, path in pushed_files(root, exclude):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        entries[relative] = {"sha256": digest, "mode": stat.S_IMODE(path.stat().st_mode)}
    return entries


def push_tree(
    hosts: Sequence[HostSpec],
    local_dir: Path,
    remote_dir: str,
    *,
    progress: Callable[[PushProgress], None] | None = None,
    exclude: Sequence[str] = DEFAULT_EXCLUDE,
    max_parallel: int = 16,
) -> list[PushResult]:
    """Make ``remote_dir`` on every host hold ``local_dir``'s files, sending only what changed.

    Files in ``remote_dir`` that deepvm never pushed are left alone. Raises TransportError naming
    every host that failed, after the others finished.
    """
    if not local_dir.is_dir():
        raise TransportError(f"{local_dir}: not a directory to push")
    manifest = local_manifest(local_dir, exclude)
    report = _serialized(progress) if progress else None
    return _on_hosts(hosts, lambda host: _push_one(host, local_dir, remote_dir, manifest, report), max_parallel)


def _push_one(
    host: HostSpec,
    local_dir: Path,
    remote_dir: str,
    manifest: dict[str, dict[str, str | int]],
    progress: Callable[[PushProgress], None] | None,
) -> PushResult:
    with contextlib.closing(connect(host)) as client, contextlib.closing(client.open_sftp()) as sftp:
        try:
            _makedirs(sftp, remote_dir, set())
            remote = _read_manifest(sftp, posixpath.join(remote_dir, MANIFEST))
            send = [path for path, entry in manifest.items() if remote.get(path) != entry]
            gone = sorted(path for path in remote if path not in manifest)
            sent = _send_files(host, sftp, local_dir, remote_dir, send, manifest, progress)
            for path in gone:
                with contextlib.suppress(FileNotFoundError):
                    sftp.remove(posixpath.join(remote_dir, path))
            _write_atomic(sftp, posixpath.join(remote_dir, MANIFEST), json.dumps(manifest, indent=1).encode())
        except OSError as exc:
            raise TransportError(f"{host.where}: writing {remote_dir} failed: {exc}") from None
    return PushResult(host.name, tuple(send), tuple(gone), len(manifest) - len(send), sent)


def _send_files(
    host: HostSpec,
    sftp: paramiko.SFTPClient,
    local_dir: Path,
    remote_dir: str,
    paths: list[str],
    manifest: dict[str, dict[str, str | int]],
    progress: Callable[[PushProgress], None] | None,
) -> int:
    """Upload ``paths`` one by one (temp name, then rename); returns the bytes sent."""
    sizes = [(local_dir / path).stat().st_size for path in paths]
    total, done = sum(sizes), 0
    made: set[str] = set()
    for index, (path, size) in enumerate(zip(paths, sizes, strict=True)):
        target = posixpath.join(remote_dir, path)
        _makedirs(sftp, posixpath.dirname(target), made)

        def tick(sent: int, _size: int, path: str = path, index: int = index, base: int = done) -> None:
            if progress:
                progress(PushProgress(host.name, path, index, len(paths), base + sent, total))

        partial = target + ".deepvm-part"
        sftp.put(str(local_dir / path), partial, callback=tick, confirm=True)
        sftp.chmod(partial, int(manifest[path]["mode"]))
        sftp.posix_rename(partial, target)
        done += size
        if progress:
            progress(PushProgress(host.name, path, index + 1, len(paths), done, total))
    return done


def _makedirs(sftp: paramiko.SFTPClient, path: str, made: set[str]) -> None:
    """mkdir -p over SFTP, remembering what exists to avoid a round trip per file."""
    if not path or path in made or path == "/":
        return
    try:
        if stat.S_ISDIR(sftp.stat(path).st_mode or 0):
            made.add(path)
            return
    except FileNotFoundError:
        pass
    _makedirs(sftp, posixpath.dirname(path.rstrip("/")), made)
    sftp.mkdir(path)
    made.add(path)


def _read_manifest(sftp: paramiko.SFTPClient, path: str) -> dict[str, dict[str, str | int]]:
    """The remote manifest; missing or unreadable means "nothing is known to be there"."""
    try:
        with sftp.open(path, "rb") as handle:
            data = json.loads(handle.read())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_atomic(sftp: paramiko.SFTPClient, path: str, data: bytes, mode: int | None = None) -> None:
    partial = path + ".deepvm-part"
    with sftp.open(partial, "wb") as handle:
        if mode is not None:
            handle.chmod(mode)  # before the content: a key is never readable by others, not even briefly
        handle.write(data)
    sftp.posix_rename(partial, path)


def write_files(host: HostSpec, files: dict[str, bytes]) -> None:
    """Write small files on ``host`` ({path: content}), owner-only (0600), each under a temporary name and
    then renamed; their directories are made as needed."""
    with contextlib.closing(connect(host)) as client, contextlib.closing(client.open_sftp()) as sftp:
        made: set[str] = set()
        try:
            for path, data in files.items():
                _makedirs(sftp, posixpath.dirname(path), made)
                _write_atomic(sftp, path, data, mode=0o600)
        except OSError as exc:
            raise TransportError(f"{host.where}: writing {path} failed: {exc}") from None


def fetch_files(host: HostSpec, remote_dir: str, names: Sequence[str], local_dir: Path) -> list[Path]:
    """Copy ``names`` from ``remote_dir`` on ``host`` into ``local_dir`` (temp name, then rename)."""
    with _sftp(host) as sftp:
        return [_fetch(host, sftp, remote_dir, name, local_dir) for name in names]


def fetch_tree(host: HostSpec, remote_dir: str, local_dir: Path) -> list[Path]:
    """Copy every file under ``remote_dir`` on ``host``, subdirectories included, into ``local_dir``: outputs
    whose names deepvm does not know (a job's own script writes them)."""
    with _sftp(host) as sftp:
        return [_fetch(host, sftp, remote_dir, name, local_dir) for name in _files_under(host, sftp, remote_dir)]


@contextlib.contextmanager
def _sftp(host: HostSpec) -> Iterator[paramiko.SFTPClient]:
    with contextlib.closing(connect(host)) as client, contextlib.closing(client.open_sftp()) as sftp:
        yield sftp


def _files_under(host: HostSpec, sftp: paramiko.SFTPClient, root: str, sub: str = "") -> list[str]:
    """Paths of the regular files under ``root``, relative to it, in name order."""
    where = posixpath.join(root, sub) if sub else root
    try:
        entries = sorted(sftp.listdir_attr(where), key=lambda e: e.filename)
    except OSError as exc:
        raise TransportError(f"{host.where}: listing {where} failed: {exc}") from None
    names = []
    for entry in entries:
        name = posixpath.join(sub, entry.filename)
        if stat.S_ISDIR(entry.st_mode or 0):
            names += _files_under(host, sftp, root, name)
        elif stat.S_ISREG(entry.st_mode or 0):
            names.append(name)
    return names


def _fetch(host: HostSpec, sftp: paramiko.SFTPClient, remote_dir: str, name: str, local_dir: Path) -> Path:
    """One file (temp name, then rename); ``name`` may have directories, made locally as needed."""
    target = local_dir / name
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".deepvm-part")
    try:
        sftp.get(posixpath.join(remote_dir, name), str(partial))
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise TransportError(f"{host.where}: fetching {remote_dir}/{name} failed: {exc}") from None
    partial.replace(target)
    return target


# --- commands -------------------------------------------------------------------------------------

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def shell_command(command: str, env: dict[str, str] | None = None, cwd: str | None = None) -> str:
    """``command`` prefixed with exports and a cd, quoted for a POSIX shell."""
    parts = []
    for name, value in (env or {}).items():
        if not _ENV_NAME.match(name):
            raise TransportError(f"invalid environment variable name {name!r}")
        parts.append(f"export {name}={shlex.quote(value)}")
    if cwd is not None:
        parts.append(f"cd {shlex.quote(cwd)}")
    return " && ".join([*parts, command]) if parts else command


class RemoteCommand:
    """A command running on a host through its login shell: each output line goes to ``on_line`` as it
    comes (stdout and stderr are read concurrently, so neither can fill up and stall the command), lines
    can be written to its stdin, and ``wait`` gives its exit status. Closing the connection ends its stdin.

    The connection gives up on data the host has not acknowledged for a minute (Linux; TCP's own limit is
    about a quarter of an hour), so a host that vanished without closing the connection ends a command
    that is being written to: it then has no exit status (-1).
    """

    def __init__(
        self,
        host: HostSpec,
        command: str,
        on_line: Callable[[OutputLine], None],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        script = shell_command(command, env, cwd)
        sink = _serialized(on_line)
        self._client = connect(host)
        try:
            transport = self._client.get_transport()
            assert transport is not None  # connect() returns a connected client
            _give_up_unacknowledged(transport.sock)
            self._channel = transport.open_session()
            self._channel.exec_command(script)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self._client.close()
            raise TransportError(f"{host.where}: starting a command failed: {exc}") from None
        self._send_lock = threading.Lock()
        self._readers = [
            threading.Thread(target=_pump, args=(self._channel.makefile("rb"), host.name, "stdout", sink)),
            threading.Thread(target=_pump, args=(self._channel.makefile_stderr("rb"), host.name, "stderr", sink)),
        ]
        for reader in self._readers:
            reader.start()

    def send_line(self, text: str) -> bool:
        """Write ``text`` and a newline to the command's stdin; False when the connection is gone."""
        try:
            with self._send_lock:
                self._channel.sendall((text + "\n").encode())
        except (OSError, EOFError, paramiko.SSHException):
            return False
        return True

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status once the command exited and all its output was handed on (-1: the connection
        closed without one); None if it still runs after ``timeout`` seconds."""
        if not self._channel.status_event.wait(timeout):
            return None
        for reader in self._readers:
            reader.join()
        return self._channel.recv_exit_status()

    def close(self) -> None:
        """Close the connection (the command's stdin ends) and stop reading its output."""
        self._channel.close()
        self._client.close()
        for reader in self._readers:
            reader.join()


def _give_up_unacknowledged(sock: object, after_ms: int = 60_000) -> None:
    option = getattr(socket, "TCP_USER_TIMEOUT", None)
    if option is not None and isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, option, after_ms)


def run_command(
    host: HostSpec,
    command: str,
    on_line: Callable[[OutputLine], None],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
) -> int:
    """Run ``command`` on ``host`` through its login shell, streaming each output line; the exit status.
    After ``timeout`` seconds the connection is closed and TransportError raised."""
    remote = RemoteCommand(host, command, on_line, env=env, cwd=cwd)
    try:
        status = remote.wait(timeout)
    finally:
        remote.close()
    if status is None:
        raise TransportError(f"{host.where}: command timed out after {timeout:g}s: {command}")
    return status


def run_on_hosts(
    hosts: Sequence[HostSpec],
    command: str,
    on_line: Callable[[OutputLine], None],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
    max_parallel: int = 16,
) -> dict[str, int]:
    """``run_command`` on every host in parallel; {host name: exit status}."""
    sink = _serialized(on_line)
    results = _on_hosts(
        hosts,
        lambda host: (host.name, run_command(host, command, sink, env=env, cwd=cwd, timeout=timeout)),
        max_parallel,
    )
    return dict(results)


def _pump(
    stream: Iterable[bytes], host: str, name: Literal["stdout", "stderr"], sink: Callable[[OutputLine], None]
) -> None:
    try:
        for raw in stream:
            sink(OutputLine(host, name, raw.decode("utf-8", "replace").rstrip("\r\n")))
    except (OSError, EOFError):
        return  # the channel closed under us (timeout): the caller reports it


# --- helpers --------------------------------------------------------------------------------------


def _serialized(callback: Callable[[T], None]) -> Callable[[T], None]:
    lock = threading.Lock()

    def call(item: T) -> None:
        with lock:
            callback(item)

    return call


def _on_hosts(hosts: Sequence[HostSpec], work: Callable[[HostSpec], R], max_parallel: int) -> list[R]:
    """``work`` on every host in parallel; results in host order, or one TransportError for all failures."""
    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=min(max_parallel, len(hosts))) as pool:
        futures = [pool.submit(work, host) for host in hosts]
    failures = [f.exception() for f in futures if f.exception() is not None]
    if failures:
        first = failures[0]
        if not isinstance(first, TransportError):
            raise first  # a bug, not a node problem: keep its traceback
        more = f" (and {len(failures) - 1} more hosts failed)" if len(failures) > 1 else ""
        raise TransportError(f"{first}{more}")
    return [f.result() for f in futures]
