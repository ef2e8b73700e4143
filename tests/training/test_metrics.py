"""metrics.json as one record (RunMetrics): the files deepvm's worker and a script's runner wrote before the
record existed still read, and the record writes them back byte for byte (a NaN of before as JSON's null)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from training.shared.events import EndStatus
from training.shared.metrics import RunMetrics

# as training/node/worker.py wrote it (json.dumps(dict, indent=1) + "\n"), the dict's keys in its order
WORKER_FILE = """{
 "job": "resnet18-rehearsal",
 "status": "completed",
 "model": "resnet18",
 "dataset": "synthetic",
 "synthetic": true,
 "seed": 0,
 "world_size": 3,
 "rank_batches": [
  8,
  8,
  8
 ],
 "global_batch": 24,
 "lr": 0.02,
 "first_step": 20,
 "steps": 40,
 "total_steps": 40,
 "epoch": 0,
 "final_loss": 2.25,
 "loss_curve": [
  [
   38,
   2.5
  ],
  [
   40,
   2.25
  ]
 ],
 "samples_per_s": 123.5,
 "wall_s": 9.5
}
"""
# as training/job.py's context wrote it for a job's own script
SCRIPT_FILE = """{
 "job": "own",
 "status": "stopped",
 "script": "own_train.py",
 "synthetic": false,
 "world_size": 2,
 "first_step": 0,
 "steps": 12,
 "total_steps": 400,
 "final_loss": NaN,
 "loss_curve": [],
 "wall_s": 1.25
}
"""


def test_a_worker_metrics_file_of_before_reads_and_writes_back_the_same():
    metrics = RunMetrics.from_json(WORKER_FILE)
    assert metrics.status is EndStatus.COMPLETED and metrics.steps == 40 and metrics.final_loss == 2.25
    assert metrics.rank_batches == (8, 8, 8) and metrics.loss_curve == ((38, 2.5), (40, 2.25))
    assert metrics.script is None and metrics.synthetic is True
    assert metrics.to_json() == WORKER_FILE


def test_a_script_metrics_file_of_before_reads_and_writes_back_the_same_but_its_nan():
    metrics = RunMetrics.from_json(SCRIPT_FILE)
    assert metrics.status is EndStatus.STOPPED and metrics.script == "own_train.py" and metrics.model is None
    assert math.isnan(metrics.final_loss) and metrics.loss_curve == ()
    assert metrics.to_json() == SCRIPT_FILE.replace("NaN", "null")


def _refuse(constant: str) -> float:
    raise ValueError(f"{constant} is not JSON")


def test_a_diverged_run_writes_strict_json_and_reads_it_back():
    """A loss that went NaN or infinite was written as `NaN` / `Infinity`, which jq, JSON.parse and serde refuse:
    the file is JSON with null in their place, and reads back with NaN there (the record's losses stay floats)."""
    diverged = replace(
        RunMetrics.from_json(WORKER_FILE),
        final_loss=math.nan,
        samples_per_s=math.inf,
        loss_curve=((38, -math.inf), (40, math.nan), (41, 2.0)),
    )
    data = json.loads(diverged.to_json(), parse_constant=_refuse)
    assert data["final_loss"] is None and data["samples_per_s"] is None
    assert data["loss_curve"] == [[38, None], [40, None], [41, 2.0]]
    back = RunMetrics.from_json(diverged.to_json())
    assert math.isnan(back.final_loss) and back.samples_per_s is None
    assert [step for step, _ in back.loss_curve] == [38, 40, 41] and back.loss_curve[2] == (41, 2.0)
    assert math.isnan(back.loss_curve[0][1]) and math.isnan(back.loss_curve[1][1])


def test_a_key_of_a_newer_writer_is_left_aside(tmp_path):
    data = json.loads(SCRIPT_FILE)
    data["gpu_hours"] = 1.0
    (tmp_path / "metrics.json").write_text(json.dumps(data))
    assert RunMetrics.read(tmp_path) == RunMetrics.from_json(SCRIPT_FILE)


def test_write_leaves_only_the_file(tmp_path):
    metrics = RunMetrics.from_json(WORKER_FILE)
    metrics.write(tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["metrics.json"]
    assert RunMetrics.read(tmp_path / "out") == metrics
