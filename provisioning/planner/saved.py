"""The plan `deepvm plan` chose, kept under DEEPVM_HOME for `deepvm up`.

Written atomically (temporary file, fsync, rename) so that a crash never leaves half a plan behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from provisioning.errors import InputError
from provisioning.home import saved_plan_path
from provisioning.planner.plan import Plan
from provisioning.planner.request import PlanRequest


def save_plan(plan: Plan, request: PlanRequest, path: Path | None = None) -> Path:
    target = path or saved_plan_path()
    document = {"plan": plan.to_dict(), "request": _request_dict(request)}
    fd, temp = tempfile.mkstemp(prefix=".plan-", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(document, handle, indent=2)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return target


def load_plan(path: Path | None = None) -> Plan:
    """The saved plan, or a plan file given by the user (a `plan` object or the plan itself)."""
    source = path or saved_plan_path()
    try:
        document: Any = json.loads(source.read_text())
    except FileNotFoundError:
        hint = "" if path else "; run `deepvm plan --max-price ...` first"
        raise InputError(f"no plan file at {source}{hint}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read plan file {source}: {exc}") from None
    try:
        return Plan.from_dict(document.get("plan", document))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{source} is not a deepvm plan ({type(exc).__name__}: {exc})") from None


def _request_dict(request: PlanRequest) -> dict[str, Any]:
    data = asdict(request)
    data["objective"] = request.objective.value
    data["regions"] = list(request.regions) if request.regions else None
    return data
