"""A small on-disk cache of JSON documents with their fetch time, under deepvm_home()/cache.

Live market data changes at different speeds (spot prices by the hour, instance specs and quotas
rarely), so each entry is read with the caller's own maximum age. Entries past their age are still
returned on request: an old price with a warning beats no price when AWS cannot be reached.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioning.core.atomicfile import write_text_atomic


@dataclass(frozen=True)
class CacheEntry:
    value: Any
    fetched_at: float  # seconds since the epoch

    def age(self, now: float) -> float:
        return now - self.fetched_at


class DiskCache:
    """JSON files named by key in `directory`; writes are atomic, so readers never see half a file."""

    def __init__(self, directory: Path, clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self.clock = clock

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> CacheEntry | None:
        """The entry stored under `key` whatever its age, or None (also for an unreadable file)."""
        try:
            document = json.loads(self._path(key).read_text(encoding="utf-8"))
            return CacheEntry(document["value"], float(document["fetched_at"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def fresh(self, key: str, max_age_s: float) -> CacheEntry | None:
        """The entry under `key` if it is at most `max_age_s` old."""
        entry = self.get(key)
        if entry is None or not 0 <= entry.age(self.clock()) <= max_age_s:
            return None
        return entry

    def put(self, key: str, value: Any) -> CacheEntry:
        entry = CacheEntry(value, self.clock())
        self.directory.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self._path(key), json.dumps({"fetched_at": entry.fetched_at, "value": value}))
        return entry
