"""Time from `deepvm up` to every node reachable over SSH in the sandbox, for growing cluster sizes.

Each size runs `deepvm up --yes --cloud sandbox` (1 on-demand anchor + N-1 spot trainers) as a user would, in
a fresh DEEPVM_HOME, and measures the command's wall time: it returns only once every node has answered
an SSH login checked against its pinned host key. "cold" includes starting the sandbox's moto server and
supervisor; "warm" reuses them. Run as root: `python benchmarks/up_bench.py [--sizes 4 16]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.cloud.plans import make_plan, write_plans  # noqa: E402

TARGET_4_NODES_S = 20.0


def deepvm(env: dict[str, str], *args: str) -> float:
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "deepvm_cli", *args], cwd=REPO, env=env, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"deepvm {' '.join(args)} failed:\n{result.stderr}")
    return elapsed


def measure(size: int, home: Path) -> dict[str, float]:
    env = {**os.environ, "DEEPVM_HOME": str(home), "NO_COLOR": "1"}
    plan = write_plans(home.parent / f"plan-{size}.json", make_plan(spot=size - 1, on_demand=1))
    try:
        cold = deepvm(env, "up", "--yes", "--cloud", "sandbox", "--plan", str(plan), "--name", "cold", "--json")
        deepvm(env, "down", "cold", "--yes")
        warm = deepvm(env, "up", "--yes", "--cloud", "sandbox", "--plan", str(plan), "--name", "warm", "--json")
        deepvm(env, "down", "warm", "--yes")
    finally:
        subprocess.run([sys.executable, "-m", "deepvm_cli", "sandbox", "stop"], cwd=REPO, env=env, capture_output=True)
    return {"nodes": size, "cold_s": round(cold, 2), "warm_s": round(warm, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the sandbox needs root")
    rows = []
    with tempfile.TemporaryDirectory(prefix="deepvm-up-bench-") as tmp:
        for size in args.sizes:
            home = Path(tmp) / f"home-{size}"
            rows.append(measure(size, home))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    base = rows[0]
    print(f"{'nodes':>5}  {'cold s':>7}  {'warm s':>7}  {'warm s/node':>11}  {'warm vs first':>13}")
    for row in rows:
        print(
            f"{row['nodes']:>5}  {row['cold_s']:>7.2f}  {row['warm_s']:>7.2f}  "
            f"{row['warm_s'] / row['nodes']:>11.2f}  {row['warm_s'] / base['warm_s']:>12.2f}x"
        )
    four = next((r for r in rows if r["nodes"] == 4), None)
    if four:
        verdict = "meets" if four["cold_s"] < TARGET_4_NODES_S else "MISSES"
        print(f"4 nodes, cold: {four['cold_s']:.2f} s — {verdict} the {TARGET_4_NODES_S:.0f} s target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
