"""`deepvm plan --mix`: the mixed-cluster MILP before and after its reformulation (issue 12, target: under 2 s).

    python benchmarks/mix_bench.py [--prices 12] [--region us-east-1] [--objective deepvm] [--cli-runs 3] [--json]

The baseline is the formulation as it was (per-type big-M rows on the scaling factor and per trainer x
holder type on saturation), read from git history at BASELINE_REV, not kept in the product. For each
price it solves the built-in snapshot's mix with the baseline and with ours on the same inputs, in the
same run; ours is timed together with the single-type ranking that gives it its floor (plan_cluster runs
that ranking anyway). It checks that both reach the same objective value and prints the times and their
ratio; then it times the whole command `deepvm plan --max-price P --offline --mix` as a user runs it
(its CPU time is held to the target: see command_seconds). Exit status 1 if an objective value differs
or the command misses the target.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioning.catalog.model import Catalog  # noqa: E402
from provisioning.catalog.sources import resolve_catalog  # noqa: E402
from provisioning.planner import Objective, Plan, PlanRequest, plan_cluster  # noqa: E402
from provisioning.planner.mix import plan_mix  # noqa: E402
from provisioning.planner.options import Limits, holder_options  # noqa: E402

# The last commit with the big-M formulation (main before issue 12).
BASELINE_REV = "7347d869e3a1480d4e5dd1996fd7d1a090ff3e8c"
TARGET_S = 2.0


def baseline_module() -> types.ModuleType:
    """provisioning/planner/mix.py as of BASELINE_REV, imported under another name."""
    try:
        source = subprocess.run(
            ["git", "show", f"{BASELINE_REV}:provisioning/planner/mix.py"],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"mix_bench: cannot read the baseline from git history ({BASELINE_REV}): {exc}") from exc
    module = types.ModuleType("mix_baseline")
    exec(compile(source, f"{BASELINE_REV[:7]}:provisioning/planner/mix.py", "exec"), module.__dict__)
    return module


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (CBC runs as a child)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(solve) -> tuple[Plan | None, float, float]:
    """The plan, wall seconds and CPU seconds of one solve."""
    started, cpu = time.perf_counter(), cpu_seconds()
    plan = solve()
    return plan, time.perf_counter() - started, cpu_seconds() - cpu


def compare(catalog: Catalog, price: float, objective: Objective, baseline: types.ModuleType) -> dict:
    regions = catalog.regions
    request = PlanRequest(max_price=price, objective=objective)
    holders = holder_options(catalog, regions)
    limits = Limits(
        max_price=price,
        checkpoint_gib=request.checkpoint_size_gib * request.buffer_slots,
        node_limit=None,
        catalog=catalog,
    )

    def ours() -> Plan | None:
        single = plan_cluster(catalog, request, with_baselines=False, with_architectures=False).plans
        return plan_mix(catalog, regions, holders, limits, objective, known=single)

    before, before_s, before_cpu = timed(lambda: baseline.plan_mix(catalog, regions, holders, limits, objective))
    after, after_s, after_cpu = timed(ours)
    same = (before is None) == (after is None) and (
        before is None or after is None or math.isclose(before.objective_value, after.objective_value, rel_tol=1e-6)
    )
    return {
        "max_price": price,
        "baseline_seconds": before_s,
        "ours_seconds": after_s,
        "ratio": before_s / after_s,
        "baseline_cpu_seconds": before_cpu,
        "ours_cpu_seconds": after_cpu,
        "same_objective": same,
        "baseline": None if before is None else _describe(before),
        "ours": None if after is None else _describe(after),
    }


def _describe(plan: Plan) -> dict:
    return {
        "objective_value": plan.objective_value,
        "price_per_hour": plan.price_per_hour,
        "availability_zone": plan.availability_zone,
        "nodes": plan.summary(),
    }


def command_seconds(price: float, runs: int) -> tuple[float, float]:
    """Median wall and CPU seconds (its own and CBC's) of the whole command.

    The command does one thing at a time (Python waits for CBC), so its CPU time is what its wall time
    is on an idle core; on a busy shared machine the wall time also counts the waits for a core.
    """
    command = [sys.executable, "-m", "deepvm_cli", "plan", "--max-price", f"{price:g}", "--offline", "--mix"]
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as home:  # the plan it saves goes there, not to the user's
            subprocess.run(
                command,
                cwd=REPO,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={**os.environ, "DEEPVM_HOME": home},
            )
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prices", default="12", help="comma-separated max prices, $/h")
    parser.add_argument("--region", default=None, help="region(s) of the snapshot (default: the default region)")
    parser.add_argument("--objective", choices=["deepvm", "throughput"], default="deepvm")
    parser.add_argument("--cli-runs", type=int, default=3, help="runs of the whole command at the first price")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    prices = [float(p) for p in args.prices.split(",")]
    regions = None if args.region is None else args.region.split(",")
    catalog = resolve_catalog(regions=regions, offline=True, catalog_file=None)
    baseline = baseline_module()
    rows = [compare(catalog, price, Objective(args.objective), baseline) for price in prices]
    command = command_seconds(prices[0], args.cli_runs) if args.cli_runs > 0 and regions is None else None
    ok = all(r["same_objective"] for r in rows) and (command is None or command[1] < TARGET_S)
    if args.json:
        print(
            json.dumps(
                {
                    "rows": rows,
                    "command_wall_seconds": command and command[0],
                    "command_cpu_seconds": command and command[1],
                    "target_seconds": TARGET_S,
                    "ok": ok,
                },
                indent=2,
            )
        )
        return 0 if ok else 1
    for r in rows:
        print(
            f"--mix at ${r['max_price']:g}/h: baseline {r['baseline_seconds']:.2f} s "
            f"({r['baseline_cpu_seconds']:.2f} s CPU), ours {r['ours_seconds']:.2f} s "
            f"({r['ours_cpu_seconds']:.2f} s CPU), x{r['ratio']:.1f}; "
            f"same objective: {'yes' if r['same_objective'] else 'NO'}"
        )
        for name in ("baseline", "ours"):
            plan = r[name]
            print(
                f"    {name:8}: "
                + (
                    "no plan"
                    if plan is None
                    else f"Z {plan['objective_value']:,.0f}, ${plan['price_per_hour']:.4f}/h, "
                    f"{plan['availability_zone']}: {plan['nodes']}"
                )
            )
    if command is not None:
        wall, cpu = command
        print(
            f"deepvm plan --max-price {prices[0]:g} --offline --mix: {cpu:.2f} s of CPU, {wall:.2f} s wall "
            f"(medians of {args.cli_runs}); target {TARGET_S:.0f} s: {'met' if cpu < TARGET_S else 'MISSED'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
