"""A job's scalars in TensorBoard: one run across relaunches and controller restarts, each step once, as
TensorBoard's own reader (tensorboard's EventAccumulator, what `tensorboard --logdir` loads) sees the
files. The controller runs in this process on the scripted cluster (tests/training/scripted_cluster.py)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.training.controller_rig import T1, Rig
from tests.training.scripted_cluster import Die, NoticeOn
from training.control.scalar_sink import TENSORBOARD_DIR, ScalarSink
from training.shared.progress import JobReporter
from training.shared.records import LogKind, LogRecord
from training.shared.scalars import MetricPoint

pytestmark = pytest.mark.timeout(60)


def scalars(directory: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of `tag` as TensorBoard shows them (purged points hidden, as its loader does)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory))
    accumulator.Reload()
    return [(e.step, e.value) for e in accumulator.Scalars(tag)]


@dataclass
class MetricsRig(Rig):
    """The controller's rig, its trainer 0 logging scalars each step; the points the log gets in `points`."""

    points: list[MetricPoint] = field(default_factory=list)

    def reporter(self) -> JobReporter:
        return replace(super().reporter(), metrics=self.points.append)


@pytest.fixture
def rig(tmp_path) -> MetricsRig:
    rig = MetricsRig(tmp_path)
    rig.world.metrics = True
    return rig


def test_a_relaunch_from_an_older_checkpoint_continues_the_run_and_each_step_shows_once(rig):
    """Node lost at step 9, checkpoint at 5: steps 6-9 are trained again, and TensorBoard shows each once,
    with the value of the attempt the run went on from."""
    rig.world.faults = [Die(1, 9, nodes=(T1,))]
    result = rig.run()
    assert [(a.first_step, a.last_step) for a in result.attempts] == [(0, 9), (5, 40)]
    board = Path(result.out_dir) / TENSORBOARD_DIR
    assert [step for step, _ in scalars(board, "loss")] == list(range(1, 41))
    assert scalars(board, "attempt") == [(s, 1.0) for s in range(1, 6)] + [(s, 2.0) for s in range(6, 41)]
    assert len(list(board.glob("events.out.tfevents.*"))) == 2  # one file per launch that redid steps


def test_a_notice_relaunch_continues_in_the_same_file(rig):
    rig.world.faults = [NoticeOn(1, 6, node=T1)]
    result = rig.run()
    board = Path(result.out_dir) / TENSORBOARD_DIR
    assert [step for step, _ in scalars(board, "loss")] == list(range(1, 41))
    assert scalars(board, "attempt")[5:7] == [(6, 1.0), (7, 2.0)]  # flushed at 6, resumed at 6: nothing redone
    assert len(list(board.glob("events.out.tfevents.*"))) == 1
    assert [p.step for p in rig.points] == list(range(1, 41))  # the log gets every point too
    assert rig.points[0] == MetricPoint(1, {"loss": 0.01, "attempt": 1.0})


def test_a_restarted_controller_continues_the_run_of_the_one_that_died(tmp_path):
    """Two controllers one after the other (the first died after step 9; the newest checkpoint was step 5)."""
    board = tmp_path / TENSORBOARD_DIR
    first = ScalarSink(board, print)
    first.launched(0)
    for step in range(1, 10):
        first.add(MetricPoint(step, {"loss": 1.0}), 1000.0 + step)
    first.close()
    second = ScalarSink(board, print)
    second.launched(5)
    for step in range(6, 13):
        second.add(MetricPoint(step, {"loss": 2.0}), 2000.0 + step)
    second.close()
    assert scalars(board, "loss") == [(s, 1.0) for s in range(1, 6)] + [(s, 2.0) for s in range(6, 13)]


def test_without_tensorboard_the_controller_says_so_once_and_writes_nothing(tmp_path, monkeypatch):
    for name in ("tensorboard", "tensorboard.compat.proto.event_pb2", "tensorboard.summary.writer.event_file_writer"):
        monkeypatch.setitem(sys.modules, name, None)  # what an import finds when it is not installed
    notes: list[str] = []
    sink = ScalarSink(tmp_path / TENSORBOARD_DIR, notes.append)
    sink.launched(0)
    for step in (1, 2, 3):
        sink.add(MetricPoint(step, {"loss": 1.0}), 1.0)
    sink.close()
    assert len(notes) == 1 and "lacks tensorboard" in notes[0] and "pip install tensorboard`" in notes[0]
    assert not (tmp_path / TENSORBOARD_DIR).exists()


def test_a_metrics_record_round_trips_through_the_log():
    record = LogRecord(LogKind.METRICS, 5.0, metrics=MetricPoint(7, {"loss": 0.25, "train/acc": 0.5}))
    assert LogRecord.from_json(record.to_json()) == record


def test_no_rank_needs_tensorboard_and_the_controller_imports_no_torch(tmp_path):
    """What the nodes run (a rank, deepvm's worker, a user's script through training.job) imports none of the
    writer's libraries: the runtime pushed to every node must not need them. And the controller, which trains
    nothing, writes its TensorBoard files without importing torch (seconds and hundreds of MB on the head)."""
    code = (
        "import sys; import training.node.rank, training.node.worker, training.job, training.node.metrics_log; "
        "print(sorted(m for m in ('tensorboardX', 'tensorboard', 'mlflow') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
    code = (
        "import sys; from pathlib import Path; import training.head.job_service\n"
        "from training.control.scalar_sink import ScalarSink; from training.shared.scalars import MetricPoint\n"
        f"sink = ScalarSink(Path({str(tmp_path)!r}), print); sink.launched(0)\n"
        "sink.add(MetricPoint(1, {'loss': 0.5}), 1.0); sink.close(); print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False" and scalars(tmp_path, "loss") == [(1, 0.5)]
