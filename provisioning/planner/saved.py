"""The plans `deepvm plan` ranked, kept under DEEPVM_HOME for `deepvm up` (best first; the others are what
`--on-shortage next-plan` falls back to). The file has the shape of `deepvm plan --json`'s "plans", so
either can be given to `deepvm up --plan`; provisioning/clusters/plan_choice.py reads both.

Written atomically (temporary file, fsync, rename) so that a crash never leaves half a plan behind.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from provisioning.core.atomicfile import write_text_atomic
from provisioning.core.home import saved_plan_path
from provisioning.planner.plan import Plan
from provisioning.planner.request import PlanRequest


def save_plans(plans: list[Plan], request: PlanRequest, path: Path | None = None) -> Path:
    target = path or saved_plan_path()
    document = {"plans": [plan.to_dict() for plan in plans], "request": _request_dict(request)}
    write_text_atomic(target, json.dumps(document, indent=2))
    return target


def _request_dict(request: PlanRequest) -> dict[str, Any]:
    data = asdict(replace(request, interruptions=None))
    data["objective"] = request.objective.value
    data["regions"] = list(request.regions) if request.regions else None
    if request.interruptions is None:
        del data["interruptions"]  # a plan without --interruptions saves what it always saved
    else:
        data["interruptions"] = request.interruptions.to_dict()
    return data
