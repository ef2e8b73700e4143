"""A job's scalars in MLflow (training/control/mlflow_sink.py), in this process against MLflow's file store under
tmp_path, read back with MLflow's own client: the points with their steps and the job's params, one run that a
second sink (a restarted controller, a relaunch that redoes steps) continues with each step once, a job resumed
on another cluster (no run file) finding its run by its tag, and a controller without MLflow saying so once."""

from __future__ import annotations

import sys

import pytest

from training.control.mlflow_sink import JOB_TAG, RUN_FILE
from training.control.scalar_sink import ScalarSink, job_sinks
from training.shared.jobstore import JobRow, JobStatus
from training.shared.scalars import MetricPoint

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def tracking(tmp_path, monkeypatch) -> str:
    # MLflow 3 keeps its file store in maintenance mode and refuses it unless told; a real server is a process
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return (tmp_path / "mlruns").as_uri()


def row(tmp_path) -> JobRow:
    return JobRow(
        "lm-20261125T170000",
        "c1",
        "lm",
        "lm.yaml",
        JobStatus.RUNNING,
        "",
        "",
        0,
        40,
        2,
        None,
        0,
        0,
        -1,
        0.0,
        0.0,
        str(tmp_path / "out"),
        "python3",
        "",
    )


def run_steps(tmp_path, uri: str, first_step: int, steps: range, value: float) -> list[str]:
    """One controller's life: a launch at `first_step`, a point per step, the end; the notes it made."""
    notes: list[str] = []
    sinks = job_sinks(row(tmp_path), {"MLFLOW_TRACKING_URI": uri}, notes.append)
    sinks.launched(first_step)
    for step in steps:
        sinks.add(MetricPoint(step, {"loss": value, "train/lr": 0.1}), 1_800_000_000.0 + step)
    sinks.close()
    return notes


def history(uri: str, key: str) -> tuple[str, list[tuple[int, float]]]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("Default").experiment_id])
    return run.info.run_id, sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))


def test_the_points_arrive_with_their_steps_and_the_jobs_params(tmp_path, tracking):
    assert run_steps(tmp_path, tracking, 0, range(1, 6), 2.0) == []
    from mlflow import MlflowClient

    run_id, loss = history(tracking, "loss")
    assert loss == [(step, 2.0) for step in range(1, 6)]
    assert [step for step, _ in history(tracking, "train/lr")[1]] == [1, 2, 3, 4, 5]
    run = MlflowClient(tracking_uri=tracking).get_run(run_id)
    assert run.data.params == {"job_name": "lm", "job_id": "lm-20261125T170000"}
    assert run.data.tags[JOB_TAG] == "lm-20261125T170000" and run.info.status == "FINISHED"
    metric = MlflowClient(tracking_uri=tracking).get_metric_history(run_id, "loss")[0]
    assert metric.timestamp == 1_800_000_001_000  # received at, in ms
    assert (tmp_path / "out" / RUN_FILE).is_file()


def test_a_second_controller_continues_the_same_run_and_sends_no_step_twice(tmp_path, tracking):
    """The first died after step 9; the second relaunches from the checkpoint of step 5 and trains 6-9 again."""
    run_steps(tmp_path, tracking, 0, range(1, 10), 1.0)
    first_run, _ = history(tracking, "loss")
    run_steps(tmp_path, tracking, 5, range(6, 13), 0.5)
    run_id, loss = history(tracking, "loss")
    assert run_id == first_run  # search_runs found exactly one run: the same
    assert loss == [(step, 1.0) for step in range(1, 10)] + [(step, 0.5) for step in range(10, 13)]


def test_a_job_resumed_elsewhere_finds_its_run_by_its_tag(tmp_path, tracking):
    run_steps(tmp_path, tracking, 0, range(1, 4), 1.0)
    first_run, _ = history(tracking, "loss")
    (tmp_path / "out" / RUN_FILE).unlink()  # a new cluster's head: a fresh out directory
    run_steps(tmp_path, tracking, 3, range(4, 6), 1.0)
    run_id, loss = history(tracking, "loss")
    assert run_id == first_run and [step for step, _ in loss] == [1, 2, 3, 4, 5]


def test_a_controller_without_mlflow_says_so_once_and_goes_on(tmp_path, tracking, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` raises ImportError
    notes = run_steps(tmp_path, tracking, 0, range(1, 4), 1.0)
    assert len(notes) == 1 and "lacks mlflow-skinny" in notes[0], notes
    assert not (tmp_path / "out" / RUN_FILE).exists()


def test_without_a_tracking_uri_only_tensorboard(tmp_path):
    sinks = job_sinks(row(tmp_path), {"OMP_NUM_THREADS": "1"}, print)
    assert [type(sink) for sink in sinks.sinks] == [ScalarSink]


def test_the_controller_sends_each_step_once_across_a_relaunch_that_redoes_steps(tmp_path, tracking):
    """The controller on the scripted cluster, its job file setting the URI: node lost at step 9, checkpoint
    at 5, steps 6-9 trained again; MLflow's run has every step once, those four with the first attempt's values."""
    from tests.training.scripted_cluster import Die
    from tests.training.test_controller import T1
    from tests.training.test_scalar_sink import MetricsRig

    rig = MetricsRig(tmp_path)
    rig.world.metrics = True
    rig.job.write_text(rig.job.read_text() + f"env: {{MLFLOW_TRACKING_URI: '{tracking}'}}\n")
    rig.world.faults = [Die(1, 9, nodes=(T1,))]
    result = rig.run()
    assert [(a.first_step, a.last_step) for a in result.attempts] == [(0, 9), (5, 40)]
    _, attempt = history(tracking, "attempt")
    assert attempt == [(s, 1.0) for s in range(1, 10)] + [(s, 2.0) for s in range(10, 41)]
