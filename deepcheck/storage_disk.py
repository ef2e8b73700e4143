"""L2: a holder's checkpoint directory on local disk.

Layout: ROOT/ckpt-<step>-<run>/shard-<index>.bin and, written last, ROOT/ckpt-<step>-<run>/manifest.json.
Every file is written to a unique temporary name, fsynced, renamed into place and the directory fsynced,
so after a crash (kill -9 or power loss) a name either holds its complete contents or does not exist.
A directory without a manifest is an incomplete checkpoint and is never restored from by itself; several
holders may share one ROOT (one machine) or each have their own (one per node) – restore merges them.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from .errors import CorruptCheckpointError
from .manifest import CheckpointId, Manifest, ShardInfo, verify_shard

log = logging.getLogger("deepcheck")
MANIFEST = "manifest.json"


def shard_name(index: int) -> str:
    return f"shard-{index:05d}.bin"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(path: Path, data: Any) -> Path:
    """Write and fsync `data` (any buffer) under a unique temporary name next to `path`; return that name."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    view = memoryview(data).cast("B")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        done = 0
        while done < len(view):
            done += os.write(fd, view[done:])
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp


def _publish(directory: Path, renames: list[tuple[Path, Path]]) -> None:
    """Rename fsynced temporary files into place; one fsync of the directory makes all renames durable."""
    for tmp, path in renames:
        os.replace(tmp, path)
    fsync_dir(directory)


def atomic_write_all(directory: Path, files: list[tuple[str, Any]]) -> None:
    """Write (name, buffer) pairs into `directory` so that no name is ever seen half-written, even after a
    crash: every file is written and fsynced under a temporary name, then all are renamed into place with
    one fsync of the directory (per batch rather than per file)."""
    _publish(directory, [(_write_temp(directory / name, data), directory / name) for name, data in files])


class DiskStore:
    """One holder's view of an L2 directory; every method is safe against a concurrent writer sharing ROOT."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.staged: dict[CheckpointId, Path] = {}  # manifests written ahead under a temporary name

    def ckpt_dir(self, ckpt: CheckpointId) -> Path:
        return self.root / ckpt.name

    def shard_path(self, ckpt: CheckpointId, index: int) -> Path:
        return self.ckpt_dir(ckpt) / shard_name(index)

    def _make_dir(self, ckpt: CheckpointId) -> Path:
        """The checkpoint's directory, created durably if new."""
        d = self.ckpt_dir(ckpt)
        if not d.is_dir():
            d.mkdir(exist_ok=True)
            fsync_dir(self.root)
        return d

    def write_shards(self, ckpt: CheckpointId, shards: list[tuple[int, Any]]) -> None:
        """Persist (index, bytes) shards of one checkpoint; they are all durable when this returns."""
        atomic_write_all(self._make_dir(ckpt), [(shard_name(i), data) for i, data in shards])

    def stage(self, manifest: Manifest) -> None:
        """Write and fsync the manifest under a temporary name while the shards are still being persisted, so
        that `commit` is only a rename and a directory fsync. A staged manifest commits nothing by itself."""
        self.staged[manifest.ckpt] = _write_temp(self._make_dir(manifest.ckpt) / MANIFEST, manifest.to_bytes())

    def unstage(self, ckpt: CheckpointId) -> None:
        """Drop a staged manifest whose checkpoint will not be committed."""
        tmp = self.staged.pop(ckpt, None)
        if tmp is not None:
            tmp.unlink(missing_ok=True)

    def commit(self, manifest: Manifest) -> None:
        """Make the checkpoint complete at L2. Call only once every shard of it is durable on every holder."""
        d = self._make_dir(manifest.ckpt)
        tmp = self.staged.pop(manifest.ckpt, None) or _write_temp(d / MANIFEST, manifest.to_bytes())
        _publish(d, [(tmp, d / MANIFEST)])

    def _ckpt_dirs(self) -> list[tuple[CheckpointId, Path]]:
        out = []
        for d in self.root.iterdir():
            ckpt = CheckpointId.parse(d.name)
            if ckpt is not None and d.is_dir():
                out.append((ckpt, d))
        return sorted(out, reverse=True)

    def manifests(self) -> list[Manifest]:
        """Committed, readable manifests, newest first. Corrupt ones are logged and skipped."""
        out = []
        for ckpt, d in self._ckpt_dirs():
            path = d / MANIFEST
            try:
                out.append(Manifest.from_bytes(path.read_bytes(), str(path)))
            except FileNotFoundError:
                continue
            except CorruptCheckpointError as exc:
                log.warning("skipping checkpoint %s: %s", ckpt, exc)
        return out

    def shard_sizes(self) -> dict[CheckpointId, dict[int, int]]:
        """Size of every shard file present, by checkpoint and shard index."""
        out: dict[CheckpointId, dict[int, int]] = {}
        for ckpt, d in self._ckpt_dirs():
            sizes = {}
            for f in d.glob("shard-*.bin"):
                try:
                    sizes[int(f.name[6:11])] = f.stat().st_size
                except (ValueError, FileNotFoundError):
                    continue
            out[ckpt] = sizes
        return out

    def read_shard(self, ckpt: CheckpointId, info: ShardInfo) -> bytearray:
        """The shard's bytes, verified against `info`; raises CorruptCheckpointError otherwise."""
        path = self.shard_path(ckpt, info.index)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                buf = bytearray(size)
                f.readinto(buf)
        except FileNotFoundError as exc:
            raise CorruptCheckpointError(f"{path}: shard file is missing") from exc
        verify_shard(buf, info, str(path))
        return buf

    def retain(self, keep: int) -> list[CheckpointId]:
        """Delete every checkpoint older than the `keep`-th newest committed one; return what was deleted.

        Incomplete directories newer than that are kept: they may be in progress, or complete on another
        holder's disk. The newest committed checkpoint is never deleted. The manifest goes first so a
        checkpoint stops being complete before any of its shards disappears.
        """
        committed = [m.ckpt for m in self.manifests()]
        if len(committed) <= keep:
            return []
        horizon = committed[keep - 1]
        deleted = []
        for ckpt, d in self._ckpt_dirs():
            if ckpt >= horizon:
                continue
            try:
                (d / MANIFEST).unlink(missing_ok=True)
                fsync_dir(d)
            except FileNotFoundError:  # another holder sharing ROOT removed it first
                pass
            shutil.rmtree(d, ignore_errors=True)
            deleted.append(ckpt)
        if deleted:
            fsync_dir(self.root)
        return deleted
