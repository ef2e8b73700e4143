"""Whole-process latency of `deepvm plan --max-price 12 --offline --region all` (target: under 1 s).

    python benchmarks/plan_latency.py [--runs 7] [--json]

Runs the command as a user does, a fresh process each time, next to the baseline of a bare Python
interpreter start in the same run, and prints the median of each, their ratio and the margin to 1 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 1.0
COMMAND = [sys.executable, "-m", "deepvm_cli", "plan", "--max-price", "12", "--offline", "--region", "all"]
BASELINE = [sys.executable, "-c", "pass"]


def median_seconds(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    baseline = median_seconds(BASELINE, args.runs)
    plan = median_seconds(COMMAND, args.runs)
    result = {
        "plan_seconds": plan,
        "python_start_seconds": baseline,
        "ratio": plan / baseline,
        "target_seconds": TARGET_S,
        "within_target": plan < TARGET_S,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"deepvm plan --max-price 12 --offline --region all: {plan:.3f} s (median of {args.runs})")
        print(
            f"bare python start: {baseline:.3f} s; ratio x{plan / baseline:.1f}; "
            f"target {TARGET_S:.1f} s: {'met' if plan < TARGET_S else 'MISSED'}"
        )
    return 0 if plan < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
