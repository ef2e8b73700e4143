"""Reading a JSON document a user hands deepvm (a plan, a catalog, a trace), bounded so that no file can
hang or crash a command.

The file is read by provisioning/core/inputfile.py (regular files only, within a size limit, UTF-8). Then at
most MAX_DEPTH levels of nesting: Python's json raises RecursionError on documents nested a thousand
deep, and every validator after it walks the document recursively. A key given twice in one object is
refused: Python keeps the last silently, so `"count": 1, ..., "count": 1000` would launch a thousand
nodes while a reader of the file sees one. Every problem is one InputError line naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from provisioning.core.errors import InputError
from provisioning.core.inputfile import MAX_DEPTH, MIB, read_user_bytes, user_text

__all__ = ["MIB", "parse_json_bytes", "read_json_file"]


def read_json_file(path: Path, what: str, max_bytes: int) -> Any:
    """The parsed document of `path`; `what` names it in errors ("plan file", "catalog file")."""
    return parse_json_bytes(read_user_bytes(path, what, max_bytes), path, what)


def parse_json_bytes(raw: bytes, path: Path | str, what: str) -> Any:
    """The parsed document of bytes already read from `path` (for callers that look at them first)."""
    text = user_text(raw, path, what)
    try:
        data = json.loads(text, object_pairs_hook=_object)
    except _DuplicateKey as exc:
        raise InputError(f"{path}: the key {exc.key!r} is given twice in one object") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise InputError(f"{path}: JSON nested more than {MAX_DEPTH} levels deep") from None
    if _depth(data) > MAX_DEPTH:
        raise InputError(f"{path}: JSON nested more than {MAX_DEPTH} levels deep")
    return data


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise _DuplicateKey(key)
        document[key] = value
    return document


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
