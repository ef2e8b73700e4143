"""Strict JSON for the files deepvm writes from a run's numbers: metrics.json, result.json, log.jsonl.

A loss that diverged is NaN and a rate over no time infinite, and Python's json writes them as `NaN` and
`Infinity`, which are not JSON: jq, JavaScript's JSON.parse and serde refuse the whole file. Here they are
null, JSON's one word for "no number", and a reader takes a null where its record has a float back as NaN
(`number`), so the record's field stays a float and its renderers print `nan` as they always did.
Its own module, importing only json and math: every trainer rank writes metrics.json through it.
"""

from __future__ import annotations

import json
import math
from typing import Any


def dumps(value: Any, **options: Any) -> str:
    """json.dumps(value, **options) with every NaN and infinity in it (at any depth) written as null."""
    return json.dumps(_finite(value), allow_nan=False, **options)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def number(value: float | None) -> float:
    """A float that `dumps` wrote: its null (a NaN or an infinity) as NaN."""
    return math.nan if value is None else value
