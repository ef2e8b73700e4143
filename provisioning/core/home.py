"""Where deepvm keeps its local state: `$DEEPVM_HOME`, by default `~/.deepvm`.

Every command that keeps state goes through `deepvm_home()`, so a home that cannot be created or written
(a read-only mount, another user's directory) is one InputError line there, naming the directory and what
to do, rather than whichever write happens to fail first (SQLite's "unable to open database file").
"""

from __future__ import annotations

import os
from pathlib import Path

from provisioning.core.errors import InputError

_FIX = "set DEEPVM_HOME to a directory you can write"


def home_path() -> Path:
    """Where the state directory is, without creating it: for reading what may be there (the config file)
    in commands that must not fail, or create anything, when it is not."""
    return Path(os.environ.get("DEEPVM_HOME") or Path.home() / ".deepvm").expanduser()


def deepvm_home() -> Path:
    """The state directory, created with owner-only permissions (it holds private keys), and writable."""
    home = home_path()
    try:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise InputError(f"cannot create deepvm's home {home}: {exc.strerror or exc}; {_FIX}") from None
    if not os.access(home, os.W_OK | os.X_OK):
        why = "a read-only file system" if _read_only_mount(home) else "no write permission"
        raise InputError(f"deepvm's home {home} is not writable ({why}); make it writable, or {_FIX}")
    return home


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def config_path() -> Path:
    """The user's defaults for flags (deepvm_cli/ui/user_config.py); not created by deepvm unless asked."""
    return home_path() / "config.yaml"


def saved_plan_path() -> Path:
    """The plan `deepvm plan` saved last, which `deepvm up` uses when given no other."""
    return deepvm_home() / "plan.json"
