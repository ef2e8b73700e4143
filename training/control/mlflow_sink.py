"""A job's scalars in MLflow too, when its job file sets `MLFLOW_TRACKING_URI` (training/shared/tracking.py).

Written where the controller runs, beside the TensorBoard files (training.control.scalar_sink) and with the
same points, by MLflow's own client (`mlflow-skinny`, the `mlflow` extra: `pip install 'deepvm[mlflow]'`),
imported only here, on the sink's thread. A controller whose Python lacks it says so once in the job's log
and sends nothing; so does one whose tracking server refuses or cannot be reached (the scalars stay in the
TensorBoard files and the log).

One run per job, across relaunches and controller restarts: the run's id is kept with the job's outputs
(OUT/mlflow_run.json: a restarted controller on the head finds it there, and `deepvm fetch` brings it), and
the run is tagged `deepvm.job_id`, by which a job resumed on another cluster (`train --resume`, a fresh out
directory) finds it again. Its params are the job's name and id; a point's step is its MLflow step.

Each step once: MLflow has no call that removes a logged metric value (its REST API logs, it never deletes
one: https://mlflow.org/docs/latest/api_reference/rest-api.html), so the steps a relaunch from an older
checkpoint trains again are not sent a second time: MLflow keeps the values the first attempt logged for
them, where TensorBoard (which can hide points) shows the redone ones. The highest step already in the run
is read back when a sink opens it, so a restarted controller sends no step twice either.

MLflow's calls are network round trips (and retries): they run on the sink's own thread, never on the
controller's, which only queues a point. A problem is said from the controller's thread, at its next call.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from provisioning.core.atomicfile import write_text_atomic
from training.shared.scalars import MetricPoint

RUN_FILE = "mlflow_run.json"  # under the job's out directory
JOB_TAG = "deepvm.job_id"
DEFAULT_EXPERIMENT = "Default"  # MLflow's own, where a run goes when no experiment is named
_BATCH = 1000  # metric values per log_batch: MLflow's limit for one request
_CLOSE_S = 30.0  # the controller's end waits at most this long for the queued points to reach MLflow


@dataclass(frozen=True)
class MlflowTarget:
    """Where the job's run goes, and what names it."""

    tracking_uri: str
    experiment: str  # MLFLOW_EXPERIMENT_NAME ("": MLflow's default experiment)
    job_id: str
    job_name: str


@dataclass(frozen=True)
class RunRecord:
    """OUT/mlflow_run.json: the job's MLflow run."""

    tracking_uri: str
    run_id: str


class MlflowSink:
    """The job's MLflow run; see the module docstring."""

    def __init__(self, target: MlflowTarget, run_file: Path, note: Callable[[str], None]) -> None:
        self.target, self.run_file = target, run_file
        self._note = note
        self._points: queue.Queue[tuple[MetricPoint, float] | None] = queue.Queue()
        self._problem: str | None = None  # set by the sink's thread, said by the controller's
        self._said = False
        self.run_id = ""  # once the run is open
        self._thread = threading.Thread(target=self._send, name="mlflow-sink", daemon=True)
        self._thread.start()

    def launched(self, first_step: int) -> None:
        """Nothing to do: steps redone after this are not sent again (see the module docstring)."""
        self._say()

    def add(self, point: MetricPoint, wall: float) -> None:
        """Queue one point (received at `wall`, time.time()) for the sink's thread."""
        self._say()
        self._points.put((point, wall))

    def close(self) -> None:
        """Send what is queued (waiting at most _CLOSE_S), mark the run finished, and end the thread."""
        self._points.put(None)
        self._thread.join(_CLOSE_S)
        self._say()

    def _say(self) -> None:
        if self._problem is not None and not self._said:
            self._said = True
            self._note(self._problem)

    def _send(self) -> None:
        client, highest = None, -1
        try:
            client, highest = self._open()
        except ImportError:
            self._problem = (
                "no MLflow run: this controller's Python lacks mlflow-skinny (`pip install 'deepvm"
                "[mlflow]'`); the scalars stay in the TensorBoard files and the job's log"
            )
        except Exception as exc:  # whatever MLflow raises (its own errors, HTTP, disk): the job goes on
            self._problem = f"no MLflow run at {self.target.tracking_uri}: {type(exc).__name__}: {exc}"[:500]
        while True:
            items = [self._points.get()]
            while not self._points.empty():
                items.append(self._points.get_nowait())
            points = [item for item in items if item is not None and item[0].step > highest]
            if client is not None and self._problem is None:
                try:
                    self._log(client, points)
                    highest = max([highest, *(point.step for point, _ in points)])
                    if None in items:
                        client.set_terminated(self.run_id, "FINISHED")
                except Exception as exc:  # as above: MLflow's trouble never stops the job
                    self._problem = f"MLflow stopped taking the job's scalars: {type(exc).__name__}: {exc}"[:500]
            if None in items:
                return

    def _open(self) -> tuple[Any, int]:
        """MLflow's client and the job's run, found or made; the highest step the run has (-1: none)."""
        from mlflow import MlflowClient  # imports in about 3 s, on this thread
        from mlflow.entities import Param

        client = MlflowClient(tracking_uri=self.target.tracking_uri)
        self.run_id = self._stored_run() or self._tagged_run(client)
        if self.run_id:
            if client.get_run(self.run_id).info.status != "RUNNING":
                client.update_run(self.run_id, "RUNNING")  # a job stopped, resumed: its run goes on
            return client, _highest_step(client, self.run_id)
        tags = {JOB_TAG: self.target.job_id}
        self.run_id = client.create_run(self._experiment(client), tags=tags, run_name=self.target.job_id).info.run_id
        client.log_batch(
            self.run_id, params=[Param("job_name", self.target.job_name), Param("job_id", self.target.job_id)]
        )
        self.run_file.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.run_file, json.dumps(asdict(RunRecord(self.target.tracking_uri, self.run_id))))
        return client, -1

    def _stored_run(self) -> str:
        if not self.run_file.is_file():
            return ""
        record = RunRecord(**json.loads(self.run_file.read_text()))
        return record.run_id if record.tracking_uri == self.target.tracking_uri else ""

    def _tagged_run(self, client: Any) -> str:
        experiment = client.get_experiment_by_name(self.target.experiment or DEFAULT_EXPERIMENT)
        if experiment is None:
            return ""
        found = client.search_runs(
            [experiment.experiment_id], f"tags.`{JOB_TAG}` = '{self.target.job_id}'", max_results=1
        )
        return found[0].info.run_id if found else ""

    def _experiment(self, client: Any) -> str:
        name = self.target.experiment or DEFAULT_EXPERIMENT
        experiment = client.get_experiment_by_name(name)
        return experiment.experiment_id if experiment is not None else client.create_experiment(name)

    def _log(self, client: Any, points: list[tuple[MetricPoint, float]]) -> None:
        from mlflow.entities import Metric

        metrics = [
            Metric(name, value, int(wall * 1000), point.step)
            for point, wall in points
            for name, value in point.values.items()
        ]
        for start in range(0, len(metrics), _BATCH):
            client.log_batch(self.run_id, metrics=metrics[start : start + _BATCH])


def _highest_step(client: Any, run_id: str) -> int:
    """The highest step of any metric the run has (-1: none)."""
    keys = client.get_run(run_id).data.metrics
    return max((m.step for key in keys for m in client.get_metric_history(run_id, key)), default=-1)
