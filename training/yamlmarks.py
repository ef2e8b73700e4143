"""Load YAML and remember where each value came from, so validation errors can name a line.

pydantic reports errors by field path (``("model", "depth")``); users edit files by line. PyYAML's
composed node tree keeps a start mark for every key and value, which is all the mapping needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provisioning.errors import InputError


@dataclass(frozen=True)
class YamlDocument:
    """One parsed YAML file: the plain Python data and the node tree it was built from."""

    path: Path  # the file, as the user named it
    data: Any  # what yaml.safe_load would return
    root: yaml.Node | None  # None for an empty file


@dataclass(frozen=True)
class Located:
    """A field path resolved against the document: the part that exists and the line it starts on."""

    line: int  # 1-based
    names: tuple[str | int, ...]  # the path as the user would write it (union tags dropped)


def read_yaml(path: Path) -> YamlDocument:
    """Parse ``path`` once into data and nodes; a missing file or bad YAML is one clear InputError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: invalid YAML: {exc}") from None
    return YamlDocument(path=path, data=data, root=root)


def locate(doc: YamlDocument, loc: Sequence[str | int]) -> Located:
    """Follow a pydantic error location through the node tree as far as it exists.

    Elements that are not children of the current node are skipped: pydantic inserts the tag of a
    discriminated union (``("dataset", "synthetic", "samples")``), and a missing field has no node.
    """
    node = doc.root
    line = node.start_mark.line + 1 if node is not None else 1
    names: list[str | int] = []
    for part in loc:
        child = _child(node, part)
        if child is None:
            continue
        key_node, node = child
        line = (key_node or node).start_mark.line + 1
        names.append(part)
    return Located(line=line, names=tuple(names))


def _child(node: yaml.Node | None, part: str | int) -> tuple[yaml.Node | None, yaml.Node] | None:
    """The (key node, value node) of ``part`` under ``node``, or None when there is no such child."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return key, value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return None, node.value[part]
    return None
