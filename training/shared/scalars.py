"""The scalars a job logs with `ctx.log(step, **scalars)`: one point of a run's metrics, and the rule for their names.

A point leaves trainer 0 as a Metrics event (training.shared.events), becomes a METRICS record of the
job's log on the side that runs its controller (the head of a managed job) and a point in its TensorBoard
files there (training.control.scalar_sink), and reaches `deepvm watch` through the log. The names are
the user's, so `values` maps them to numbers; everything else about a point is a field.

deepvm's own worker logs these names (WORKER_SCALARS); a user's script logs whatever it names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from training.shared.strict_json import number

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]{0,127}")  # TensorBoard tags: `train/loss` groups under `train`
MAX_SCALARS = 64  # per point: a line on the wire stays small, and a chart stays readable

LOSS = "loss"  # the global loss (mean over trainers), the curve `deepvm watch` draws first
WORKER_SCALARS = (LOSS, "samples_per_s", "lr", "step_time_s")  # what deepvm's own worker logs


@dataclass(frozen=True)
class MetricPoint:
    """Scalars of one step, as trainer 0 logged them."""

    step: int  # the step they belong to (steps done, counting from 1)
    values: dict[str, float]  # name -> value; the names are the job's own (NAME), NaN and inf kept (a log's: NaN)

    def __post_init__(self) -> None:
        problem = point_problem(self.step, self.values)
        if problem:
            raise ValueError(problem)

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "values": dict(self.values)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricPoint:
        """The point as a log record holds it: strict JSON, where a NaN or infinite value is null (NaN here)."""
        return cls(step=data["step"], values={name: number(value) for name, value in dict(data["values"]).items()})


def point_problem(step: object, values: object) -> str | None:
    """Why (step, values) is not a point ctx.log accepts, or None: said at the call, on the rank, before
    anything is sent."""
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return f"ctx.log: the step must be a whole number >= 0, not {step!r}"
    if not isinstance(values, dict) or not values:
        return "ctx.log: name at least one scalar, e.g. ctx.log(step, loss=loss)"
    if len(values) > MAX_SCALARS:
        return f"ctx.log: at most {MAX_SCALARS} scalars a call, not {len(values)}"
    for name, value in values.items():
        if not isinstance(name, str) or not NAME.fullmatch(name):
            return f"ctx.log: {name!r} is not a scalar name (letters, digits, _ . / -, up to 128)"
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"ctx.log: {name}={value!r} is not a number"
    return None
