"""metrics.json: what trainer 0 writes into the job's out directory when its run ends, as one record.

Written by deepvm's worker (training.node.worker) and by the runner of a job's own script (training.job,
through training.node.userscript), read back by the controller when the job completes, and fetched to
the user's machine with the model. Its own module, light on imports: every trainer rank imports it.

The file's format is what it has always been (tests/training/test_metrics.py reads files written before
this record): one JSON object, indented, the fields in this record's order; a fact only one writer knows
is left out when the other writes (deepvm's worker knows the model and the batch, a script's runner only
the script's name). It is strict JSON (training.shared.strict_json): a loss or a rate that was NaN or
infinite is null there, where files of before had `NaN`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from training.shared.events import EndStatus
from training.shared.strict_json import dumps, number

METRICS_FILE = "metrics.json"


@dataclass(frozen=True, kw_only=True)
class RunMetrics:
    """One run's metrics (one attempt's: a relaunched job's last attempt writes the completed one)."""

    job: str  # the job spec's name
    status: EndStatus  # completed, or stopped cleanly after a checkpoint
    script: str | None = None  # a job's own script: its path as the spec names it
    model: str | None = None  # deepvm's worker: the model's name
    dataset: str | None = None  # deepvm's worker: the dataset's kind
    synthetic: bool  # trained on generated data (a job's own script: always False)
    seed: int | None = None  # deepvm's worker: the job's seed
    world_size: int  # trainers in this run
    rank_batches: tuple[int, ...] | None = None  # deepvm's worker: each trainer's batch
    global_batch: int | None = None  # deepvm's worker: samples per step over all trainers
    lr: float | None = None  # deepvm's worker: the base learning rate, scaled for the global batch
    first_step: int  # the step this run started from (restored)
    steps: int  # steps done when it ended
    total_steps: int  # the step the job completes at
    epoch: int | None = None  # deepvm's worker: the epoch it ended in
    final_loss: float  # the last global loss (NaN when none was reported, or it was not finite)
    loss_curve: tuple[tuple[int, float], ...]  # (step, global loss) of the whole job, resumed runs included
    samples_per_s: float | None = None  # deepvm's worker: samples trained per second in this run
    wall_s: float  # seconds this run trained

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if v is not None}
        return dumps(data, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RunMetrics:
        """The record of a metrics.json; a key this record does not know (a newer writer's) is left aside, and a
        loss written as null (not finite) is NaN."""
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {k: v for k, v in data.items() if k in known}
        values["status"] = EndStatus(values["status"])
        values["final_loss"] = number(values["final_loss"])
        values["loss_curve"] = tuple((int(step), number(loss)) for step, loss in values["loss_curve"])
        if values.get("rank_batches") is not None:
            values["rank_batches"] = tuple(values["rank_batches"])
        return cls(**values)

    def write(self, out_dir: Path) -> None:
        """Write it into `out_dir` under a temporary name, then rename it: a reader never sees half of it."""
        out_dir.mkdir(parents=True, exist_ok=True)
        partial = out_dir / f"{METRICS_FILE}.part"
        partial.write_text(self.to_json())
        partial.replace(out_dir / METRICS_FILE)

    @classmethod
    def read(cls, out_dir: Path) -> RunMetrics:
        return cls.from_json((out_dir / METRICS_FILE).read_text())
