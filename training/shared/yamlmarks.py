"""Load YAML and remember where each value came from, so validation errors can name a line.

pydantic reports errors by field path (``("model", "depth")``); users edit files by line. PyYAML's
composed node tree keeps a start mark for every key and value, which is all the mapping needs.

The file is untrusted: it is read by provisioning/core/inputfile.py (a regular file, within a size limit), and
parsed by a loader bounded in nesting (MAX_DEPTH) and in what aliases expand to (MAX_VALUES, no cycles),
whose every failure is one InputError line. Duplicate keys are reported with the document, for its
reader to refuse alongside its own findings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provisioning.core.errors import InputError
from provisioning.core.inputfile import MAX_DEPTH, read_user_file


@dataclass(frozen=True)
class DuplicateKey:
    """A key given twice in one mapping. PyYAML keeps the last silently, so `lr: 0.1` under a later
    `lr: 10` would train with 10 and nobody would know why; the reader of the document refuses it."""

    line: int  # 1-based, of the second (or later) occurrence
    names: tuple[str | int, ...]  # the key's path from the top
    first_line: int


@dataclass(frozen=True)
class YamlDocument:
    """One parsed YAML file: the plain Python data and the node tree it was built from."""

    path: Path  # the file, as the user named it
    data: Any  # what yaml.safe_load would return
    root: yaml.Node | None  # None for an empty file
    duplicate_keys: tuple[DuplicateKey, ...] = ()  # in the file's order


@dataclass(frozen=True)
class Located:
    """A field path resolved against the document: the part that exists and the line it starts on."""

    line: int  # 1-based
    names: tuple[str | int, ...]  # the path as the user would write it (union tags dropped)


MAX_VALUES = 100_000  # values a document may expand to through aliases (a job spec has a few dozen)


def read_yaml(path: Path, what: str, limit_bytes: int) -> YamlDocument:
    """Parse ``path`` once into data and nodes; any problem with the file or its YAML is one InputError
    line, with the line number where there is one. `what` names the file in errors ("job file")."""
    text = read_user_file(path, what, limit_bytes)
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)  # refuses NUL and other characters YAML does not allow, at once
        root = loader.get_single_node()
        if root is not None:
            _check_expansion(root)
        data = loader.construct_document(root) if root is not None else None
    except _Refused as exc:
        raise InputError(f"{path}:{exc.line}: {exc.problem}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return YamlDocument(path=path, data=data, root=root, duplicate_keys=_duplicate_keys(root))


class _Refused(Exception):
    """A document refused at a line: deeper than MAX_DEPTH, aliases that explode, a value YAML cannot build."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the checks a hostile file needs.

    - Nesting stops at MAX_DEPTH collections: the composer recurses, so a file nested thousands deep
      would end in RecursionError.
    - A scalar the constructor cannot build (`2024-13-45`, `!!int x`) is an error at its line: PyYAML
      raises ValueError, IndexError or AttributeError for those, not a YAMLError.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._collections_open = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        opens = self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent)
        if opens and self._collections_open >= MAX_DEPTH:
            raise _Refused(self.peek_event().start_mark.line + 1, f"YAML nested more than {MAX_DEPTH} levels deep")
        self._collections_open += opens
        try:
            return super().compose_node(parent, index)
        finally:
            self._collections_open -= opens

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, AttributeError, IndexError, OverflowError) as exc:
            shown = node.value if isinstance(node, yaml.ScalarNode) else node.tag
            raise _Refused(node.start_mark.line + 1, f"invalid YAML value {shown!r} ({exc})") from None


def _check_expansion(root: yaml.Node) -> None:
    """Refuse what aliases make of a document: a node inside itself (a cycle), more than MAX_DEPTH levels,
    or more than MAX_VALUES values (a few lines of aliases can stand for billions of values, and every
    step after this one walks them). Iterative, memoised per node: the walk costs the file's size."""
    done: dict[int, tuple[int, int]] = {}  # id(node) -> (values, collection depth) it expands to
    entered: set[int] = set()  # the nodes on the current path
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        children = _children(node)
        if leaving:
            entered.discard(id(node))
            values = 1 + sum(done[id(c)][0] for c in children)
            depth = (not isinstance(node, yaml.ScalarNode)) + max((done[id(c)][1] for c in children), default=0)
            if depth > MAX_DEPTH:
                raise _Refused(node.start_mark.line + 1, f"YAML nested more than {MAX_DEPTH} levels deep (aliases)")
            if values > MAX_VALUES:
                raise _Refused(node.start_mark.line + 1, f"YAML expands to more than {MAX_VALUES:,} values (aliases)")
            done[id(node)] = (values, depth)
        elif id(node) in entered:
            raise _Refused(node.start_mark.line + 1, "an alias refers to a node that contains it")
        elif id(node) not in done:
            entered.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children)


def _duplicate_keys(root: yaml.Node | None) -> tuple[DuplicateKey, ...]:
    """Every key given twice in one mapping, each mapping looked at once (aliases share nodes)."""
    found: list[DuplicateKey] = []
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, tuple[str | int, ...]]] = [(root, ())] if root is not None else []
    while stack:
        node, names = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*names, index)) for index, item in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            first_line: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != _MERGE_TAG:
                    line = key.start_mark.line + 1
                    if (key.tag, key.value) in first_line:  # also twice on one line: `{script: a, script: b}`
                        first = first_line[(key.tag, key.value)]
                        found.append(DuplicateKey(line=line, names=(*names, key.value), first_line=first))
                    else:
                        first_line[(key.tag, key.value)] = line
                    stack.append((value, (*names, key.value)))
    return tuple(sorted(found, key=lambda d: d.line))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []


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
        for key, value in reversed(node.value):  # a duplicate key's value is its last one, as in the data
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return key, value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return None, node.value[part]
    return None
