"""What trainer 0's metrics cost training: deepvm's worker's step time with its Metrics events and without.

    .venv/bin/python benchmarks/metrics_cost.py [--steps 60] [--pairs 5] [--json]

One rank (gloo, CPU) trains the tiny ResNet-18 job of the tests, logging every step (log_every: 1, the most
a job can log: WORKER_SCALARS at every step, each point read and printed by training.node.metrics_log's
thread), then the same run with --no-metrics; the two alternate --pairs times so that the machine's load
falls on both alike. A run's step time is its wall time over its steps (RunMetrics.wall_s: first step to
the end, the End event after the metrics thread has sent every point). Printed: the median step time of
each, and their ratio (with / without). Events go to /dev/null, as they would to a fast reader.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path

JOB = """\
name: bench
seed: 1
model: {name: resnet18, num_classes: 4}
dataset: {kind: synthetic, samples: 256, image_shape: [3, 16, 16], classes: 4, seed: 0}
steps: STEPS
batch_size: 8
log_every: 1
optimizer: {name: sgd, lr: 0.02, momentum: 0.9}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def step_time(job: Path, out: Path, log_metrics: bool) -> float:
    """One run's seconds per step."""
    from training.node.distenv import DistEnv
    from training.node.worker import WorkerOptions, run_training
    from training.shared.jobspec import load_job_spec

    env = DistEnv(rank=0, world_size=1, local_rank=0, local_size=1, master_addr="127.0.0.1", master_port=_free_port())
    opts = WorkerOptions(job=job, out=out, device="cpu", threads=1, log_metrics=log_metrics)
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        metrics = run_training(load_job_spec(job), env, opts)
    return metrics.wall_s / (metrics.steps - metrics.first_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    with tempfile.TemporaryDirectory(prefix="deepvm-metrics-bench-") as work:
        job = Path(work) / "bench.yaml"
        job.write_text(JOB.replace("STEPS", str(args.steps)))
        step_time(job, Path(work) / "warm", True)  # imports, the first step's allocations
        with_, without = [], []
        for pair in range(args.pairs):
            with_.append(step_time(job, Path(work) / f"with-{pair}", True))
            without.append(step_time(job, Path(work) / f"without-{pair}", False))
    result = {
        "steps": args.steps,
        "pairs": args.pairs,
        "step_s_without": statistics.median(without),
        "step_s_with": statistics.median(with_),
    }
    result["ratio"] = result["step_s_with"] / result["step_s_without"]
    if args.json:
        print(json.dumps(result))
        return
    print(f"worker step time, every step logged ({args.steps} steps, median of {args.pairs} alternating runs):")
    print(f"  without metrics  {1000 * result['step_s_without']:.2f} ms")
    print(f"  with metrics     {1000 * result['step_s_with']:.2f} ms")
    print(f"  ratio            x{result['ratio']:.3f}")


if __name__ == "__main__":
    main()
