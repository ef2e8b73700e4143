"""How long-running cloud operations report progress without printing (the CLI renders it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Reporter:
    """Progress callbacks: a step ("launching 4 nodes"), or a count ("reachable over SSH", 3, 4)."""

    step: Callable[[str], None] = lambda message: None
    count: Callable[[str, int, int], None] = lambda label, done, total: None
