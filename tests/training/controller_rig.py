"""The rig of the in-process controller tests (test_controller.py, test_controller_market.py): the scripted cluster
(tests/training/scripted_cluster.py) and a real Controller to run on it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from provisioning.planner.plan import Plan
from tests.training.scripted_cluster import FakeBuyer, FakeCluster, ScriptedNodes, World, tiering_plan
from training.control.controller import Controller
from training.control.jobrecord import TrainRequest
from training.control.nodepool import NodeStatus
from training.shared.jobspec import load_job_spec
from training.shared.jobstore import JobRow, JobStore
from training.shared.progress import JobReporter, Outcome, Progress, TrainResult

JOB = """\
name: fake
steps: 40
batch_size: 8
log_every: 1
model: {name: resnet18, num_classes: 10}
dataset: {kind: synthetic, samples: 64, image_shape: [3, 8, 8], classes: 10, seed: 0}
checkpoint: {every_steps: 5, levels: LEVELS}
"""
T0, T1, T2, H0 = "i-t0000000", "i-t0000001", "i-t0000002", "i-h0000000"


@dataclass
class Rig:
    """The scripted cluster, and a controller to run on it."""

    tmp: Path
    world: World = field(default_factory=World)
    notes: list[str] = field(default_factory=list)
    logs: list[tuple[str, str]] = field(default_factory=list)  # (prefix, text): the ranks' own output lines
    steps: list[int] = field(default_factory=list)
    progress: list[Progress] = field(default_factory=list)  # every progress record the job reported
    plan: Plan = field(default_factory=tiering_plan)
    # the job's own clock ("steps"): a step is this many seconds of one trainer's work, so it takes that over
    # the trainers there are; the clock has run `elapsed_s` over the steps the controller has seen
    work_s_per_step: float = 0.6
    elapsed_s: float = 0.0
    hook: Callable[[str], None] | None = None  # called with every note the job says (after it is kept)

    def __post_init__(self) -> None:
        self.cluster = FakeCluster(self.tmp, self.plan)
        self.buyer = FakeBuyer(self.cluster)
        self.nodes = ScriptedNodes(self.cluster, self.world)
        self.job = self.tmp / "job" / "fake.yaml"
        self.job.parent.mkdir()
        self.job.write_text(JOB.replace("LEVELS", "[l1, l2]"))
        self.cancel_file = self.tmp / "cancel"
        self.controller: Controller | None = None

    def launched_script(self) -> Rig:
        """The job is a user's own script that takes no ctx.step (run.calls_step: false; the world's Launched)."""
        self.job.write_text("name: fake\nrun: {script: train.py, calls_step: false}\n")
        (self.job.parent / "train.py").write_text("print('training')\n")
        return self

    def with_l3(self) -> Rig:
        self.job.write_text(JOB.replace("LEVELS", "[l1, l2, l3], s3_prefix: 's3://b/run'"))
        return self

    def cancel(self, mode: str) -> Callable[[], None]:
        """What `deepvm cancel` does on the head (training.head.query): the request file, written whole."""

        def write() -> None:
            partial = self.cancel_file.with_suffix(".tmp")
            partial.write_text(mode)
            partial.replace(self.cancel_file)

        return write

    def reporter(self) -> JobReporter:
        def progress(p: Progress) -> None:
            self.progress.append(p)
            self.steps.append(p.step)
            self.elapsed_s += self.work_s_per_step / max(p.world_size, 1)

        return JobReporter(
            note=self._note, progress=progress, log=lambda prefix, text: self.logs.append((prefix, text))
        )

    def _note(self, text: str) -> None:
        self.notes.append(text)
        if self.hook is not None:
            self.hook(text)

    def build(self, clock: str | None = None, **asked: object) -> Controller:
        """The controller for the request with `asked` changed. `clock` sets the recovery ladder's clock (and
        the nodes' bills), so that its backoffs, deadlines and budgets pass in milliseconds: "fast", the wall
        clock a thousand times faster; "steps", the job's own (elapsed_s: the time the steps the controller
        has seen took at the trainers there were), which never depends on the machine's load and stands
        still between attempts (so a relaunch takes no time on it, as the ladder is told from the start)."""
        request = replace(TrainRequest(self.job, self.cluster.name, "python3", cancel_file=self.cancel_file), **asked)
        self.controller = Controller(
            load_job_spec(self.job),
            request,
            self.cluster,
            self.tmp / "runtime",
            self.reporter(),
            self.buyer,
            self.nodes,
            tick_s=0.01,
        )
        if clock is not None:
            start, wall = time.monotonic(), time.time()
            clocks = {
                "fast": lambda: wall + (time.monotonic() - start) * 1000.0,
                "steps": lambda: wall + self.elapsed_s,
            }
            market = self.controller.market
            market.clock = self.buyer.clock = clocks[clock]
            self.cluster.bill_by(clocks[clock])
            if clock == "fast":  # the controller's waits for the ladder's timer pass as fast as its clock
                ladder_wait_s = market.wait_s
                market.wait_s = lambda: None if (s := ladder_wait_s()) is None else s / 1000.0  # type: ignore[method-assign]
            if clock == "steps":
                market.relaunch_s = 0.0
        return self.controller

    def run(self, clock: str | None = None, **asked: object) -> TrainResult:
        return self.build(clock, **asked).run()

    def row(self) -> JobRow:
        (row,) = JobStore().all()
        return row

    def wait_note(self, text: str) -> None:
        """Until the controller has said `text` (the scripted job waits for it: no race on a loaded machine)."""
        deadline = time.monotonic() + 5
        while text not in self.notes and time.monotonic() < deadline:
            time.sleep(0.002)

    def open_gate_on(self, prefix: str) -> None:
        """Let the purchases through once the controller says a note starting `prefix` (a purchase completes
        only once the controller waits for it)."""
        self.hook = lambda text: self.buyer.gate.set() if text.startswith(prefix) else None

    def wait_ready(self, instance_id_prefix: str) -> None:
        """Until the controller's pool has a ready node bought for the job (an id it did not start with)."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            pool = self.controller.pool if self.controller else None
            if pool and any(
                i.startswith(instance_id_prefix) and s.status is NodeStatus.READY and i not in (T0, T1, T2)
                for i, s in list(pool.slots.items())
            ):
                return
            time.sleep(0.002)
        raise AssertionError("no replacement became ready")


def attempts_of(result: TrainResult) -> list[tuple[int, int, int, Outcome]]:
    """(trainers, first step, last step, outcome) of each attempt."""
    return [(a.world_size, a.first_step, a.last_step, a.status) for a in result.attempts]
