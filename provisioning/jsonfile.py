"""Reading a JSON document a user hands deepvm (a plan, a catalog, a trace), bounded so that no file can
hang or crash a command.

Every problem is one InputError line naming the file. The limits, and why:
- Only regular files are read: /dev/zero or a FIFO never ends, and a directory is a mistake to say plainly.
- At most `max_bytes` are read (one more byte tells a file that is too large), so a huge file is refused
  without being read whole.
- At most MAX_DEPTH levels of nesting: Python's json raises RecursionError on documents nested a
  thousand deep, and every validator after it walks the document recursively. No deepvm document needs
  more than a handful of levels.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from provisioning.errors import InputError

MAX_DEPTH = 32
MIB = 1024 * 1024


def read_json_file(path: Path, what: str, max_bytes: int) -> Any:
    """The parsed document of `path`; `what` names it in errors ("plan file", "catalog file")."""
    return parse_json_bytes(read_bounded(path, what, max_bytes), path, what)


def parse_json_bytes(raw: bytes, path: Path | str, what: str) -> Any:
    """The parsed document of bytes already read from `path` (for callers that look at them first)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text; expected a JSON {what}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise InputError(f"{path}: JSON nested more than {MAX_DEPTH} levels deep") from None
    if _depth(data) > MAX_DEPTH:
        raise InputError(f"{path}: JSON nested more than {MAX_DEPTH} levels deep")
    return data


def read_bounded(path: Path, what: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; InputError naming the file otherwise."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(f"{what} is a directory: {path}")
        if not stat.S_ISREG(mode):
            raise InputError(f"{what} is not a regular file: {path}")
        with open(path, "rb") as handle:
            raw = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise InputError(f"{what} not found: {path}") from None
    except OSError as exc:  # permissions, a symlink loop, a name too long
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise InputError(f"{what} {path} is larger than {max_bytes / MIB:g} MiB; refusing to read it")
    return raw


def _depth(data: Any) -> int:
    """How deeply lists and objects nest in `data` (a scalar is depth 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(value, dict):
            stack.extend((child, depth + 1) for child in value.values())
        elif isinstance(value, list):
            stack.extend((child, depth + 1) for child in value)
    return deepest
