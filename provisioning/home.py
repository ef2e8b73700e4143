"""Where deepvm keeps its local state: `$DEEPVM_HOME`, by default `~/.deepvm`."""

from __future__ import annotations

import os
from pathlib import Path


def deepvm_home() -> Path:
    """The state directory, created with owner-only permissions (it holds private keys)."""
    home = Path(os.environ.get("DEEPVM_HOME") or Path.home() / ".deepvm").expanduser()
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    return home


def saved_plan_path() -> Path:
    """The plan `deepvm plan` saved last, which `deepvm up` uses when given no other."""
    return deepvm_home() / "plan.json"
