"""DeepVM's simulation sweep: our MILP planner against the paper's exhaustive search, price by price.

    python benchmarks/plan_sweep.py [--catalog tests/data/deepvm_simul_data.json] [--json]

At every max price from 0.1 to 10.0 $/h (step 0.1) on the paper's simulation catalog with a node limit
of 255 and no quotas (as the paper's simulation), it checks that our Z is at least the paper's and our
plan within the price, and reports the effective throughput of every policy. It times our whole sweep
and the paper's literal exhaustive search (on --literal-prices evenly spaced prices, extrapolated to
the whole sweep unless all are run) and prints the speed-up. Exit status 1 if any check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import deepvm_reference as paper  # noqa: E402
from provisioning.catalog.files import load_catalog_file  # noqa: E402
from provisioning.catalog.model import Catalog  # noqa: E402
from provisioning.planner import PlanRequest, plan_budgets  # noqa: E402

# The paper's simulation defaults: a 2 GiB checkpoint, buffer 0.5 -> holders need 1 GiB of RAM.
PAPER_BUFFER, PAPER_CHECKPOINT = 0.5, 2.0


def sweep_prices() -> list[float]:
    return [round(0.1 * i, 1) for i in range(1, 101)]


def our_plans(catalog: Catalog, prices: list[float]) -> dict[float, dict | None]:
    """Our planner's best plan at each price (None where none exists), all prices in one MILP."""
    request = PlanRequest(
        max_price=max(prices),
        node_limit=255,
        buffer_slots=1,
        checkpoint_size_gib=PAPER_CHECKPOINT * PAPER_BUFFER,
        top=1,
    )
    out: dict[float, dict | None] = {}
    for price, plan in zip(prices, plan_budgets(catalog, request, prices)):
        if plan is None:
            out[price] = None
            continue
        out[price] = {
            "z": plan.objective_value,
            "price": plan.price_per_hour,
            "effective_flops": plan.effective_flops,
            "architecture": plan.architecture.value,
            "nodes": " + ".join(f"{g.count}x{g.instance_type} {g.market.value}" for g in plan.nodes),
        }
    return out


def paper_rows(data: dict, prices: list[float], search) -> dict[float, dict]:
    rows = {}
    for price in prices:
        best = search(data, price, PAPER_BUFFER, PAPER_CHECKPOINT)
        no_scale = search(data, price, PAPER_BUFFER, PAPER_CHECKPOINT, scaling=False)
        cost = paper.cost_first(data, price)
        perf = paper.performance_first(data, price)
        rows[price] = {
            "z": best.z if best else None,
            "deepvm_flops": paper.performance(best.gpu, best.n) if best else None,
            "no_scaling_flops": paper.performance(no_scale.gpu, no_scale.n) if no_scale else None,
            "cost_first_flops": paper.performance(*cost) if cost else None,
            "performance_first_flops": paper.performance(*perf) if perf else None,
        }
    return rows


def compare(prices, ours, theirs) -> list[dict]:
    table = []
    for price in prices:
        mine, ref = ours[price], theirs[price]
        ok = (ref["z"] is None or (mine is not None and mine["z"] >= ref["z"] * (1 - 1e-9))) and (
            mine is None or mine["price"] <= price + 1e-9
        )
        table.append({"max_price": price, "ours": mine, "paper": ref, "ok": ok})
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", default=str(REPO / "tests" / "data" / "deepvm_simul_data.json"))
    parser.add_argument(
        "--literal-prices",
        type=int,
        default=5,
        help="prices on which to time the paper's literal exhaustive search (100 = all)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)

    data = json.loads(Path(args.catalog).read_text())
    catalog = load_catalog_file(Path(args.catalog))
    prices = sweep_prices()

    started = time.perf_counter()
    ours = our_plans(catalog, prices)
    ours_seconds = time.perf_counter() - started
    theirs = paper_rows(data, prices, paper.pruned_search)
    table = compare(prices, ours, theirs)

    step = max(1, len(prices) // max(1, args.literal_prices))
    sample = prices[step - 1 :: step][: args.literal_prices]
    started = time.perf_counter()
    literal = {p: paper.exhaustive_search(data, p, PAPER_BUFFER, PAPER_CHECKPOINT) for p in sample}
    literal_per_price = (time.perf_counter() - started) / max(1, len(sample))
    literal_agrees = all((literal[p].z if literal[p] else None) == theirs[p]["z"] for p in sample)
    paper_seconds = literal_per_price * len(prices)

    summary = {
        "prices": len(prices),
        "all_ok": all(row["ok"] for row in table) and literal_agrees,
        "ours_seconds": ours_seconds,
        "paper_seconds": paper_seconds,
        "paper_seconds_extrapolated": len(sample) < len(prices),
        "paper_seconds_per_price": literal_per_price,
        "speedup": paper_seconds / ours_seconds if ours_seconds else None,
    }
    if args.json:
        print(json.dumps({"summary": summary, "table": table}, indent=2))
    else:
        _print_table(table, summary)
    return 0 if summary["all_ok"] else 1


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _print_table(table: list[dict], summary: dict) -> None:
    header = (
        f"{'max $/h':>7} {'paper Z':>12} {'our Z':>12} {'ours/paper':>10} {'our $/h':>8} "
        f"{'cost-first':>10} {'perf-first':>10} {'no-scaling':>10} {'deepvm':>8}  our plan"
    )
    print(header)
    for row in table:
        ours, ref = row["ours"], row["paper"]
        ratio = ours["z"] / ref["z"] if ours and ref["z"] else None
        print(
            f"{row['max_price']:>7.1f} {_fmt(ref['z']):>12} {_fmt(ours and ours['z']):>12} "
            f"{_fmt(ratio, 4):>10} {_fmt(ours and ours['price'], 4):>8} "
            f"{_fmt(ref['cost_first_flops']):>10} {_fmt(ref['performance_first_flops']):>10} "
            f"{_fmt(ref['no_scaling_flops']):>10} {_fmt(ours and ours['effective_flops']):>8}  "
            f"{(ours or {}).get('nodes', '-')}{'' if row['ok'] else '  <-- FAILS'}"
        )
    extrapolated = " (extrapolated)" if summary["paper_seconds_extrapolated"] else ""
    print(
        f"\nours: {summary['ours_seconds']:.3f} s for {summary['prices']} prices; "
        f"paper's exhaustive search: {summary['paper_seconds']:.1f} s{extrapolated} "
        f"({summary['paper_seconds_per_price']:.2f} s per price); speed-up x{summary['speedup']:.0f}"
    )
    print("all checks passed" if summary["all_ok"] else "SOME CHECKS FAILED")


if __name__ == "__main__":
    sys.exit(main())
