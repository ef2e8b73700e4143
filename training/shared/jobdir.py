"""Which files of a directory deepvm pushes to the nodes, and its one rule for symbolic links.

A pushed directory (the job's, deepvm's runtime) arrives on the nodes as regular files
(training/shared/transport.py). A symbolic link to a regular file inside the directory goes as that file:
its target's bytes at the link's path, so a `run.script` that is a link runs at the path the job file
names, and every node sees what this machine sees. Every other link is refused before anything is
started, in one line naming it and what to do: one to a file outside the directory would send what the
user never put there (a key, a credentials file) and break the promise that only the job directory goes;
one to a directory may loop or send a tree twice; a dangling one names nothing. Links are not recreated
as links on the nodes: an absolute or outward target would dangle there, and a copy of an inward one
costs only its bytes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from fnmatch import fnmatch
from pathlib import Path

from provisioning.core.errors import InputError

DEFAULT_EXCLUDE = ("__pycache__", "*.pyc", ".git", ".venv", ".pytest_cache", ".ruff_cache")


def checked_job_file(job_file: Path) -> Path:
    """`job_file` resolved (a linked job file's directory is its target's, and the job file is named as it is
    there), after refusing any link its directory's push would refuse: before a cluster is looked at."""
    resolved = job_file.resolve()
    pushed_files(resolved.parent, DEFAULT_EXCLUDE)
    return resolved


def pushed_files(root: Path, exclude: Sequence[str]) -> list[tuple[str, Path]]:
    """(path relative to `root` in posix form, the file whose bytes go there) of every regular file under
    `root`, sorted; a name matching a pattern of `exclude` is left out with everything below it. A link
    the rule above refuses is an InputError naming it."""
    root = root.resolve()
    found: list[tuple[str, Path]] = []
    for folder, dirs, files in os.walk(root):  # never into a linked directory: it is refused below
        here = Path(folder)
        dirs[:] = [d for d in dirs if not _excluded(d, exclude)]
        for name in dirs:
            if (here / name).is_symlink():
                raise InputError(_refusal(root, here / name, "a directory"))
        for name in files:
            path = here / name
            if _excluded(name, exclude):
                continue
            relative = path.relative_to(root).as_posix()
            if path.is_symlink():
                found.append((relative, _linked_file(root, path)))
            elif path.is_file():  # a FIFO or a socket holds nothing to push
                found.append((relative, path))
    return sorted(found)


def _excluded(name: str, exclude: Sequence[str]) -> bool:
    return any(fnmatch(name, pattern) for pattern in exclude)


def _linked_file(root: Path, link: Path) -> Path:
    """The regular file inside `root` that `link` leads to, or the InputError that refuses it."""
    try:
        target = link.resolve(strict=True)
    except (OSError, RuntimeError):  # dangling, or a loop of links
        raise InputError(_refusal(root, link, "nothing (it is dangling or loops)")) from None
    if not target.is_relative_to(root):
        raise InputError(_refusal(root, link, f"{target}, outside the job directory"))
    if not target.is_file():
        raise InputError(_refusal(root, link, "a directory" if target.is_dir() else "no regular file"))
    return target


def _refusal(root: Path, link: Path, leads_to: str) -> str:
    return (
        f"{link}: a symbolic link to {leads_to}; deepvm pushes {root} as regular files and follows a link "
        "only to a regular file inside it: copy or move what the job needs into it"
    )
