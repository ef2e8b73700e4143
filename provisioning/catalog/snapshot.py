"""The built-in price snapshot: a dated catalog shipped as package data, used offline and as fallback.

Whoever shows a plan or price made from it must say so and give its date (`catalog.source == "snapshot"`,
`catalog.as_of`); `snapshot_notes()` says how its numbers were obtained.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import date, datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from provisioning.catalog.json_form import catalog_from_dict, catalog_to_dict
from provisioning.catalog.model import Catalog

SNAPSHOT_RESOURCE = "data/snapshot.json"


@lru_cache(maxsize=1)
def _snapshot_document() -> dict[str, Any]:
    text = resources.files("provisioning.catalog").joinpath(SNAPSHOT_RESOURCE).read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def _parsed_snapshot() -> Catalog:
    return catalog_from_dict(_snapshot_document(), source="snapshot")


def load_snapshot() -> Catalog:
    """The built-in catalog (source "snapshot"). Parsed once per process; each caller gets its own copy,
    so adding warnings or restricting regions never changes what the next caller sees."""
    cached = _parsed_snapshot()
    return replace(
        cached, types=dict(cached.types), prices=list(cached.prices), quotas=list(cached.quotas), warnings=[]
    )


def snapshot_notes() -> list[str]:
    """How the snapshot's numbers were obtained (which are published figures and which are estimates)."""
    return list(_snapshot_document().get("notes", []))


def snapshot_age(as_of: str, today: date | None = None) -> str:
    """How old a snapshot dated `as_of` (ISO date or time) is, as a reader counts: "17 months old", "12 days
    old". Prices move within months, so the age is what tells a user how far to trust them."""
    taken = date.fromisoformat(as_of[:10])
    today = today or datetime.now(timezone.utc).date()
    months = (today.year - taken.year) * 12 + today.month - taken.month - (today.day < taken.day)
    if months >= 2:
        return f"{months} months old"
    days = max((today - taken).days, 0)
    return f"{days} day{'s' * (days != 1)} old"


def snapshot_label(catalog: Catalog) -> str:
    """How to name a snapshot catalog to a user, e.g. "the built-in price snapshot of 2025-07-01"."""
    return f"the built-in price snapshot of {catalog.as_of}"


def save_snapshot(catalog: Catalog, path: Path, notes: Sequence[str]) -> None:
    """Write `catalog` in the snapshot's form (the compact catalog JSON plus notes) to `path`."""
    document = {**catalog_to_dict(catalog), "source": "snapshot", "notes": list(notes)}
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
