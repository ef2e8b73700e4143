"""`deepvm simulate`: how fast the vectorised engine is, and how well its model predicts the paper's runs.

    python benchmarks/simulate_bench.py [--runs 10000] [--reference-runs 100] [--trace NAME] [--json]

Speed. The paper's 18-node plan (tests/data/deepvm_data.json at $3/h: 17 g4dn.xlarge Spot trainers and
a c5.xlarge on-demand holder) does a week of work (168 h at full speed) on a week-long trace: by default
the 16-node V100 capacity series of us-east-2b (270 h of 5-minute samples, capacity swinging between 0
and 16; every run starts at its own random offset and wraps around). The engine simulates --runs runs;
the pure-Python reference loop (simulation/reference.py, the same model one event at a time) simulates
the first --reference-runs of the *same* runs (same draws), scaled to 1,000, and each of its results is
checked equal to the engine's. It prints the time per 1,000 runs of both, the ratio, and whether the
whole --runs took less than the target (5 s for 10,000 runs on the project's 2-core machine). Both wall
and CPU time are shown: on a shared machine the wall time carries other people's load.

Paper. With no interruptions, the makespans the model predicts for the paper's real-world plans
(DeepVM's decision, cost-first, performance-first at $3/h) against the measured ones
(tests/data/realworld_makespan.csv), by benchmarks/paper_realworld.py: the ranking must be DeepVM <
cost-first < performance-first, and each baseline's predicted ratio to DeepVM should be within 15 % of
the measured ratio. Both are printed, for DeepVM's default curves and for profiles of DeepVM's measured
scaling; neither is tuned to these runs.

Exit status 1 if the engine and the reference disagree, or a model ranks the paper's runs wrongly.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.paper_realworld import CATALOG, PAPER_CAP, paper_json, paper_lines, paper_models, ranked_as_measured  # noqa: E402
from provisioning.catalog.files import load_catalog_file  # noqa: E402
from provisioning.catalog.model import Catalog  # noqa: E402
from provisioning.planner import PlanRequest, plan_cluster  # noqa: E402
from simulation.case import SimCase  # noqa: E402
from simulation.cluster import sim_cluster  # noqa: E402
from simulation.engine import simulate  # noqa: E402
from simulation.policies import PLAN_ONLY_RECOVERY  # noqa: E402
from simulation.recovery import Workload  # noqa: E402
from simulation.reference import run_one  # noqa: E402
from simulation.trace import Trace  # noqa: E402

WEEK_H = 168.0
TARGET_S, TARGET_RUNS = 5.0, 10_000


def speed(catalog: Catalog, trace: Trace, runs: int, reference_runs: int) -> dict:
    plan = plan_cluster(catalog, PlanRequest(max_price=PAPER_CAP)).plans[0]
    cluster = sim_cluster(plan, catalog)
    work = cluster.full_pflop_per_hour * WEEK_H
    case = SimCase(
        cluster, tuple(trace for _ in cluster.spot_groups), PLAN_ONLY_RECOVERY, Workload(work, runs=runs, seed=0)
    )
    wall, cpu = time.perf_counter(), time.process_time()
    draws = case.draws()
    out = simulate(case, draws)
    engine_wall, engine_cpu = time.perf_counter() - wall, time.process_time() - cpu
    checked = min(reference_runs, runs)
    wall, cpu = time.perf_counter(), time.process_time()
    results = [run_one(case, draws, r) for r in range(checked)]
    reference_wall, reference_cpu = time.perf_counter() - wall, time.process_time() - cpu
    agree = all(
        (one.makespan_h, one.cost_usd, one.interruptions, one.restarts)
        == (out.makespan_h[r], out.cost_usd[r], out.interruptions[r], out.restarts[r])
        for r, one in enumerate(results)
    )
    return {
        "plan": plan.summary(),
        "trace": trace.name,
        "work_hours_at_full_speed": WEEK_H,
        "runs": runs,
        "reference_runs": checked,
        "engine_s": round(engine_wall, 3),
        "engine_cpu_s": round(engine_cpu, 3),
        "engine_s_per_1000": round(engine_wall / runs * 1000, 4),
        "engine_cpu_s_per_1000": round(engine_cpu / runs * 1000, 4),
        "reference_s_per_1000": round(reference_wall / checked * 1000, 2),
        "reference_cpu_s_per_1000": round(reference_cpu / checked * 1000, 2),
        "speedup": round((reference_wall / checked) / (engine_wall / runs), 1),
        "speedup_cpu": round((reference_cpu / checked) / (engine_cpu / runs), 1),
        "target": f"{TARGET_RUNS:,} runs in < {TARGET_S:g} s",
        "projected_target_runs_s": round(engine_wall / runs * TARGET_RUNS, 2),
        "target_met": engine_wall / runs * TARGET_RUNS < TARGET_S,
        "target_met_cpu": engine_cpu / runs * TARGET_RUNS < TARGET_S,
        "reference_agrees": agree,
        "mean_makespan_h": round(float(out.makespan_h.mean()), 2),
        "mean_cost_usd": round(float(out.cost_usd.mean()), 2),
        "interruptions_per_run": round(float(out.interruptions.mean()), 1),
        "restarts_per_run": round(float(out.restarts.mean()), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=TARGET_RUNS)
    parser.add_argument("--reference-runs", type=int, default=100)
    parser.add_argument("--trace", default="aws-v100-16-us-east-2b", help="a shipped trace or a trace file")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from simulation.traces import resolve_trace

    catalog = load_catalog_file(CATALOG)
    timing = speed(catalog, resolve_trace(args.trace), args.runs, args.reference_runs)
    models = paper_models(catalog)
    ranked = all(ranked_as_measured(rows) for rows in models.values())
    ok = timing["reference_agrees"] and ranked
    if args.json:
        print(json.dumps({"speed": timing, "paper": paper_json(models), "paper_ranking_ok": ranked}, indent=1))
        return 0 if ok else 1
    t = timing
    print(f"{t['plan']}, {t['work_hours_at_full_speed']:g} h of work at full speed, trace {t['trace']}")
    print(
        f"  mean makespan {t['mean_makespan_h']} h, cost ${t['mean_cost_usd']}, "
        f"{t['interruptions_per_run']} interruptions and {t['restarts_per_run']} restarts per run"
    )
    print(
        f"  engine:    {t['runs']:,} runs in {t['engine_s']:.2f} s wall ({t['engine_cpu_s']:.2f} s CPU): "
        f"{t['engine_s_per_1000']:.3f} s per 1,000 runs ({t['engine_cpu_s_per_1000']:.3f} s CPU)"
    )
    print(
        f"  reference: {t['reference_runs']} of the same runs, {t['reference_s_per_1000']:.1f} s per 1,000 "
        f"runs ({t['reference_cpu_s_per_1000']:.1f} s CPU); results equal: {t['reference_agrees']}"
    )
    print(f"  engine vs reference: x{t['speedup']:g} wall, x{t['speedup_cpu']:g} CPU")
    print(
        f"  target {t['target']}: {'met' if t['target_met'] else 'MISSED'} by wall time "
        f"(projected {t['projected_target_runs_s']:.2f} s), {'met' if t['target_met_cpu'] else 'MISSED'} by CPU"
    )
    print()
    print("\n".join(paper_lines(models)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
