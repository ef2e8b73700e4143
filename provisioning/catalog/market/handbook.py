"""The hand-written source of the built-in snapshot (provisioning/catalog/data/snapshot.json).

deepvm must answer with no network at all, so it ships a dated catalog. Where live AWS cannot be read
to build it, it is written from AWS's published specifications and on-demand Linux prices, and the
parts that are estimates (spot prices, availability zones, quotas) say so in the snapshot's notes.
`deepvm market --save-snapshot FILE` writes a snapshot from live AWS instead.

Regenerate the shipped file after editing this table:

    python -m provisioning.catalog.market.handbook provisioning/catalog/data/snapshot.json
"""

from __future__ import annotations

import sys
from pathlib import Path

from provisioning.catalog.market.families import family_of
from provisioning.catalog.market.gpus import gpu_tflops
from provisioning.catalog.model import P5_SPOT_GROUP, Catalog, InstanceType, Market, Price, Quota, quota_group_of
from provisioning.catalog.snapshot import save_snapshot

AS_OF = "2025-07-01"

# name, vCPUs, memory GiB, network Gbps ("up to" at its peak), GPU model, GPU count, on-demand $/h in
# us-east-1 (Linux, shared tenancy; p4d and p5 after AWS's June 2025 price reduction).
SPECS: tuple[tuple[str, int, float, float, str | None, int, float], ...] = (
    ("g4dn.xlarge", 4, 16, 25, "T4", 1, 0.526),
    ("g4dn.2xlarge", 8, 32, 25, "T4", 1, 0.752),
    ("g4dn.4xlarge", 16, 64, 25, "T4", 1, 1.204),
    ("g4dn.8xlarge", 32, 128, 50, "T4", 1, 2.176),
    ("g4dn.16xlarge", 64, 256, 50, "T4", 1, 4.352),
    ("g4dn.12xlarge", 48, 192, 50, "T4", 4, 3.912),
    ("g4dn.metal", 96, 384, 100, "T4", 8, 7.824),
    ("g5.xlarge", 4, 16, 10, "A10G", 1, 1.006),
    ("g5.2xlarge", 8, 32, 10, "A10G", 1, 1.212),
    ("g5.4xlarge", 16, 64, 25, "A10G", 1, 1.624),
    ("g5.8xlarge", 32, 128, 25, "A10G", 1, 2.448),
    ("g5.16xlarge", 64, 256, 25, "A10G", 1, 4.096),
    ("g5.12xlarge", 48, 192, 40, "A10G", 4, 5.672),
    ("g5.24xlarge", 96, 384, 50, "A10G", 4, 8.144),
    ("g5.48xlarge", 192, 768, 100, "A10G", 8, 16.288),
    ("g6.xlarge", 4, 16, 10, "L4", 1, 0.8048),
    ("g6.2xlarge", 8, 32, 10, "L4", 1, 0.9776),
    ("g6.4xlarge", 16, 64, 25, "L4", 1, 1.3232),
    ("g6.8xlarge", 32, 128, 25, "L4", 1, 2.0144),
    ("g6.16xlarge", 64, 256, 25, "L4", 1, 3.3968),
    ("g6.12xlarge", 48, 192, 40, "L4", 4, 4.6016),
    ("g6.24xlarge", 96, 384, 50, "L4", 4, 6.6752),
    ("g6.48xlarge", 192, 768, 100, "L4", 8, 13.3504),
    ("g6e.xlarge", 4, 32, 20, "L40S", 1, 1.861),
    ("g6e.2xlarge", 8, 64, 20, "L40S", 1, 2.24208),
    ("g6e.4xlarge", 16, 128, 20, "L40S", 1, 3.00424),
    ("g6e.8xlarge", 32, 256, 25, "L40S", 1, 4.52856),
    ("g6e.16xlarge", 64, 512, 35, "L40S", 1, 7.57719),
    ("g6e.12xlarge", 48, 384, 100, "L40S", 4, 10.49264),
    ("g6e.24xlarge", 96, 768, 200, "L40S", 4, 15.06559),
    ("g6e.48xlarge", 192, 1536, 400, "L40S", 8, 30.13118),
    ("p3.2xlarge", 8, 61, 10, "V100", 1, 3.06),
    ("p3.8xlarge", 32, 244, 10, "V100", 4, 12.24),
    ("p3.16xlarge", 64, 488, 25, "V100", 8, 24.48),
    ("p4d.24xlarge", 96, 1152, 400, "A100-40GB", 8, 21.9576),
    ("p5.48xlarge", 192, 2048, 3200, "H100", 8, 55.04),
    ("c5.xlarge", 4, 8, 10, None, 0, 0.17),
    ("c5.2xlarge", 8, 16, 10, None, 0, 0.34),
    ("c5.4xlarge", 16, 32, 10, None, 0, 0.68),
    ("c5n.xlarge", 4, 10.5, 25, None, 0, 0.216),
    ("c5n.2xlarge", 8, 21, 25, None, 0, 0.432),
    ("c5n.4xlarge", 16, 42, 25, None, 0, 0.864),
    ("c6i.xlarge", 4, 8, 12.5, None, 0, 0.17),
    ("c6i.2xlarge", 8, 16, 12.5, None, 0, 0.34),
    ("c6i.4xlarge", 16, 32, 12.5, None, 0, 0.68),
    ("c6in.xlarge", 4, 8, 30, None, 0, 0.2268),
    ("c6in.2xlarge", 8, 16, 40, None, 0, 0.4536),
    ("c6in.4xlarge", 16, 32, 50, None, 0, 0.9072),
    ("m5.xlarge", 4, 16, 10, None, 0, 0.192),
    ("m5.2xlarge", 8, 32, 10, None, 0, 0.384),
    ("m5.4xlarge", 16, 64, 10, None, 0, 0.768),
    ("m6i.xlarge", 4, 16, 12.5, None, 0, 0.192),
    ("m6i.2xlarge", 8, 32, 12.5, None, 0, 0.384),
    ("m6i.4xlarge", 16, 64, 12.5, None, 0, 0.768),
    ("r6i.xlarge", 4, 32, 12.5, None, 0, 0.252),
    ("r6i.2xlarge", 8, 64, 12.5, None, 0, 0.504),
    ("r6i.4xlarge", 16, 128, 12.5, None, 0, 1.008),
    ("t3.xlarge", 4, 16, 5, None, 0, 0.1664),
    ("t3.2xlarge", 8, 32, 5, None, 0, 0.3328),
    ("d3.xlarge", 4, 32, 15, None, 0, 0.499),
    ("d3.2xlarge", 8, 64, 15, None, 0, 0.999),
    ("d3.4xlarge", 16, 128, 15, None, 0, 1.998),
)

# Regional on-demand price relative to us-east-1 (US regions list the same prices; eu-west-1 is about
# 12 % dearer across these families) and the availability zones given spot prices.
REGIONS: dict[str, tuple[float, tuple[str, ...]]] = {
    "us-east-1": (1.0, ("a", "b", "c", "d", "f")),
    "us-east-2": (1.0, ("a", "b", "c")),
    "us-west-2": (1.0, ("a", "b", "c", "d")),
    "eu-west-1": (1.12, ("a", "b", "c")),
}
NOT_OFFERED: frozenset[tuple[str, str]] = frozenset({("eu-west-1", "p5.48xlarge")})

# Spot price as a fraction of on-demand, per family. Families in DeepVM's data.json (observed by its
# authors) use its ratio; the others are typical long-run ratios, i.e. estimates.
SPOT_RATIO: dict[str, float] = {
    "g4dn": 0.30,
    "g5": 0.30,
    "c5": 0.59,
    "c5n": 0.59,
    "c6in": 0.56,
    "m6i": 0.62,
    "t3": 0.62,
    "d3": 0.32,
    "g6": 0.40,
    "g6e": 0.45,
    "p3": 0.30,
    "p4d": 0.45,
    "p5": 0.50,
    "c6i": 0.55,
    "m5": 0.55,
    "r6i": 0.45,
}
# Fixed factors so that zones differ the way they do in practice (a few percent either way). The factor
# of zone i for the f-th family (in SPOT_RATIO's order) is AZ_SPREAD[(i + f) % 5], so that no one zone is
# cheapest for everything. Not observed values.
AZ_SPREAD: tuple[float, ...] = (1.00, 1.06, 0.95, 1.03, 1.10)

# Example vCPU quotas of an established account (new accounts start far lower).
EXAMPLE_QUOTAS: dict[str, dict[Market, float]] = {
    "Standard": {Market.ON_DEMAND: 640, Market.SPOT: 640},
    "G and VT": {Market.ON_DEMAND: 256, Market.SPOT: 512},
    "P": {Market.ON_DEMAND: 192, Market.SPOT: 192},
    P5_SPOT_GROUP: {Market.SPOT: 192},  # P5 spot has its own quota (InstanceType.quota_group_in)
}

NOTES: tuple[str, ...] = (
    "Built in: written by hand from AWS's published instance specifications and on-demand Linux "
    f"(shared tenancy) prices as of {AS_OF}, not read from a live account.",
    "network_gbps: 'up to X Gigabit' taken as X.",
    "flops: dense FP16/BF16 tensor TFLOPS per GPU (provisioning/catalog/data/gpus.json, with sources) x GPU count.",
    "On-demand prices outside us-east-1: us-east-1 x a regional factor (1.0 for US regions, 1.12 for eu-west-1).",
    "Spot prices are ESTIMATES: on-demand x a per-family ratio (DeepVM's observed ratios for g4dn, g5, "
    "c5, c5n, c6in, m6i, t3, d3; typical ratios for the rest) x a fixed factor per family and zone "
    "of 0.95 to 1.10. "
    "Live mode reads real spot prices per availability zone.",
    "Quotas are EXAMPLE vCPU quotas of an established account (Standard 640/640, G and VT 256 on-demand / "
    "512 spot, P 192/192, P5 spot 192); live mode reads the account's own from Service Quotas.",
    "scaling is null for every type: the planner applies measured fits itself.",
)


def build_catalog() -> Catalog:
    """The snapshot as a Catalog, from the tables above."""
    types: dict[str, InstanceType] = {}
    prices: list[Price] = []
    for name, vcpus, memory, network, gpu, gpu_count, od_usd in SPECS:
        types[name] = InstanceType(
            name=name,
            quota_group=quota_group_of(name),
            vcpus=vcpus,
            memory_gib=float(memory),
            network_gbps=float(network),
            gpu_model=gpu,
            gpu_count=gpu_count,
            flops=round(gpu_tflops(gpu) * gpu_count, 2),
        )
        for region, (factor, zones) in REGIONS.items():
            if (region, name) in NOT_OFFERED:
                continue
            on_demand = round(od_usd * factor, 4)
            prices.append(Price(name, region, None, Market.ON_DEMAND, on_demand))
            family = family_of(name)
            shift = list(SPOT_RATIO).index(family)
            for index, zone in enumerate(zones):
                spread = AZ_SPREAD[(index + shift) % len(AZ_SPREAD)]
                spot = round(on_demand * SPOT_RATIO[family] * spread, 4)
                prices.append(Price(name, region, f"{region}{zone}", Market.SPOT, spot))
    quotas = [
        Quota(region, group, market, vcpus)
        for region in REGIONS
        for group, by_market in EXAMPLE_QUOTAS.items()
        for market, vcpus in by_market.items()
    ]
    return Catalog(types=types, prices=prices, quotas=quotas, source="snapshot", as_of=AS_OF)


if __name__ == "__main__":
    save_snapshot(build_catalog(), Path(sys.argv[1]), NOTES)
