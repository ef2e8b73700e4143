"""What `deepvm watch` knows of a job: its log records and the head's snapshots folded into one state.

Records come in the log's order, live or replayed from a copy, so every time here is the record's own
(the head's clock), never this machine's: a replay shows the same ETA the live view showed.

A metric's curve follows the rule the TensorBoard files follow (training/control/scalar_sink.py): a point
at a step the curve already passed (a relaunch redoing steps from an older checkpoint) replaces the
points from that step on, so each step shows once, from the attempt the run went on from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deepvm_cli.render.chart import Point
from deepvm_cli.render.job import Eta
from training.shared.jobstore import JobStatus
from training.shared.progress import Progress
from training.shared.records import LogKind, LogRecord
from training.shared.scalars import LOSS
from training.shared.watch_records import Snapshot


@dataclass
class WatchModel:
    """The job's view state; `add` folds in one record or snapshot."""

    job_id: str
    curves: dict[str, list[Point]] = field(default_factory=dict)  # metric name -> (step, value), steps rising
    progress: Progress | None = None  # trainer 0's newest progress
    progress_loss: list[Point] = field(default_factory=list)  # the loss as progress records said it
    status: JobStatus = JobStatus.RUNNING
    ended: str = ""  # why the job is over, as its log's last state record says it
    snapshot: Snapshot | None = None  # the head's newest
    eta_s: float | None = None  # time left at the recent pace (None: not known yet)
    _now: float = 0.0
    _eta: Eta = field(init=False)

    def __post_init__(self) -> None:
        self._eta = Eta(clock=lambda: self._now)

    def add(self, item: LogRecord | Snapshot) -> None:
        if isinstance(item, Snapshot):
            self.snapshot = item
            if item.job.status.final:
                self.status = item.job.status
            return
        self._now = item.at
        match item.kind:
            case LogKind.METRICS if item.metrics is not None:
                for name, value in item.metrics.values.items():
                    _extend(self.curves.setdefault(name, []), item.metrics.step, value)
            case LogKind.PROGRESS if item.progress is not None:
                self.progress = item.progress
                if item.progress.script is not None:  # a launched script without steps: no loss, no step to time
                    return
                _extend(self.progress_loss, item.progress.step, item.progress.loss)
                self.eta_s = self._eta.left_s(item.progress.step, item.progress.total_steps)
            case LogKind.STATE if item.status is not None:
                self.status, self.ended = item.status, item.text

    @property
    def loss_curve(self) -> list[Point]:
        """The loss as trainer 0 logged it (or, from a runtime without ctx.log, as its progress said it)."""
        return self.curves.get(LOSS) or self.progress_loss

    @property
    def other_curves(self) -> dict[str, list[Point]]:
        return {name: points for name, points in self.curves.items() if name != LOSS}

    @property
    def projected_usd(self) -> float | None:
        """What the job will have cost at its end: so far, plus what the cluster bills now for the time left."""
        if self.snapshot is None:
            return None
        money = self.snapshot.money
        if self.status.final:
            return money.usd
        return None if self.eta_s is None else money.usd + money.usd_per_hour * self.eta_s / 3600


def _extend(curve: list[Point], step: int, value: float) -> None:
    while curve and curve[-1][0] >= step:  # redone steps: the newer attempt's values replace them
        curve.pop()
    curve.append((step, value))
