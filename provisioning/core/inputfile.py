"""Reading a file the user hands deepvm (a job spec, a plan, a catalog, a trace), bounded so that no file
can hang or crash a command.

Every reader of such a file goes through `read_user_file`, and every problem is one InputError line
naming the file and what it was meant to be. The limits, and why:
- Only regular files are read. /dev/zero or a FIFO never ends, and a directory is a mistake to say
  plainly. The file is opened without blocking and checked on the open descriptor, so a FIFO swapped in
  after a check cannot hang the read either.
- At most `limit_bytes` are read (one more byte tells a file that is too large), so a 60 MB file is
  refused without being read whole.
- Text is UTF-8.
- A missing file suggests the path the user probably meant (`configs/resnet.yaml` for `resnet.yaml`).

MAX_DEPTH bounds the nesting of the documents read (JSON here in provisioning/core/jsonfile.py, YAML in
training/shared/yamlmarks.py): Python's parsers recurse, and so does every validator after them. No deepvm
document needs more than a handful of levels.
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from itertools import islice
from pathlib import Path

from provisioning.core.errors import InputError

MAX_DEPTH = 32
KIB = 1024
MIB = 1024 * KIB
_LISTING_LIMIT = 500  # directory entries looked at for a suggestion: a huge directory must not slow an error


def read_user_file(path: Path, what: str, limit_bytes: int) -> str:
    """The text of `path`; `what` names it in errors ("job file", "plan file", "catalog file")."""
    return user_text(read_user_bytes(path, what, limit_bytes), path, what)


def user_text(raw: bytes, path: Path | str, what: str) -> str:
    """`raw` as UTF-8 text, or one InputError line naming the file and the first byte that is not."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text (byte {exc.start}); save the {what} as UTF-8") from None


def read_user_bytes(path: Path, what: str, limit_bytes: int) -> bytes:
    """The bytes of `path`, for readers that look at them before choosing a parser (trace files)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError(f"{what} not found: {path}{_did_you_mean(Path(path))}") from None
    except OSError as exc:
        raise InputError(_unreadable(path, what, exc)) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"{what} is a directory: {path}")
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{what} is not a regular file: {path}")
        raw = b"" if info.st_size > limit_bytes else _read_at_most(fd, limit_bytes + 1)
    except OSError as exc:
        raise InputError(_unreadable(path, what, exc)) from None
    finally:
        os.close(fd)
    if info.st_size > limit_bytes or len(raw) > limit_bytes:
        raise InputError(f"{what} {path} is larger than {size_text(limit_bytes)}; refusing to read it")
    return raw


def _read_at_most(fd: int, n_bytes: int) -> bytes:
    chunks: list[bytes] = []
    while n_bytes > 0:
        chunk = os.read(fd, min(n_bytes, MIB))
        if not chunk:
            break
        chunks.append(chunk)
        n_bytes -= len(chunk)
    return b"".join(chunks)


def size_text(n_bytes: int) -> str:
    """1048576 -> '1 MiB', 65536 -> '64 KiB', 1584 -> '1.55 KiB': sizes as people write them."""
    for unit, name in ((MIB, "MiB"), (KIB, "KiB")):
        if n_bytes >= unit:
            return f"{n_bytes / unit:.3g} {name}"
    return f"{n_bytes} bytes"


def _unreadable(path: Path, what: str, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return f"cannot read {what} {path}: its symbolic links form a loop"
    return f"cannot read {what} {path}: {exc.strerror or exc}"


def _did_you_mean(path: Path) -> str:
    """'; did you mean X?' for a missing file: the same name one directory down (configs/resnet.yaml for
    resnet.yaml), else a close name beside it (resnet.yaml for resnt.yaml); '' when nothing is close."""
    parent = path.parent
    try:
        entries = list(islice(os.scandir(parent), _LISTING_LIMIT))
    except OSError:
        return ""
    for entry in sorted(entries, key=lambda e: e.name):
        candidate = parent / entry.name / path.name
        if not entry.name.startswith(".") and entry.is_dir() and candidate.is_file():
            return f"; did you mean {candidate}?"
    files = [e.name for e in entries if e.is_file()]
    close = difflib.get_close_matches(path.name, files, n=1, cutoff=0.8)
    return f"; did you mean {parent / close[0]}?" if close else ""
