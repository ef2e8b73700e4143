"""Live instance specifications from EC2 `DescribeInstanceTypes`.

EC2 states network performance as text ("Up to 25 Gigabit", "4x 100 Gigabit", "Moderate"); the planner
needs Gbps, so it is parsed here, "up to" values at their peak as AWS and DeepVM quote them.
"""

from __future__ import annotations

import re
from typing import Any

from provisioning.catalog.market.aws import paginate
from provisioning.catalog.market.families import is_wanted, type_name_patterns
from provisioning.catalog.market.gpus import canonical_gpu_model, gpu_tflops
from provisioning.catalog.model import Catalog, InstanceType, quota_group_of

# Older types state network performance in words. "Moderate" (c3.xlarge) and "High" (c4.xlarge) are
# DeepVM's iperf measurements (0.3 and 1.7 Gbps, the first steps of its saturation table); the lower
# grades are scaled down from them.
NAMED_NETWORK_GBPS: dict[str, float] = {
    "very low": 0.05,
    "low": 0.1,
    "low to moderate": 0.2,
    "moderate": 0.3,
    "high": 1.7,
}
_GIGABIT = re.compile(r"^(?:up to\s+)?(?:(\d+)\s*x\s*)?(\d+(?:\.\d+)?)\s*gigabit$", re.IGNORECASE)


def parse_network_gbps(text: str) -> float | None:
    """Gbps of an EC2 NetworkPerformance string, or None for a form this code does not know."""
    normalised = " ".join(text.split()).lower()
    if normalised in NAMED_NETWORK_GBPS:
        return NAMED_NETWORK_GBPS[normalised]
    match = _GIGABIT.match(normalised)
    if not match:
        return None
    cards = int(match.group(1) or 1)
    return cards * float(match.group(2))


def instance_type_from_aws(info: dict[str, Any]) -> InstanceType | None:
    """An InstanceType from one DescribeInstanceTypes entry; None when its network cannot be read."""
    network = parse_network_gbps(info.get("NetworkInfo", {}).get("NetworkPerformance", ""))
    if network is None:
        return None
    gpus = info.get("GpuInfo", {}).get("Gpus", [])
    model = None
    count = 0
    if gpus:
        first = gpus[0]
        model = canonical_gpu_model(first["Name"], first.get("MemoryInfo", {}).get("SizeInMiB"))
        count = sum(int(g.get("Count", 0)) for g in gpus)
    name = info["InstanceType"]
    return InstanceType(
        name=name,
        quota_group=quota_group_of(name),
        vcpus=int(info["VCpuInfo"]["DefaultVCpus"]),
        memory_gib=round(info["MemoryInfo"]["SizeInMiB"] / 1024, 3),
        network_gbps=network,
        gpu_model=model,
        gpu_count=count,
        flops=round(gpu_tflops(model) * count, 2),
    )


def fetch_instance_types(ec2: Any) -> tuple[Catalog, list[str]]:
    """The wanted instance types offered in the client's region, and warnings about types that cannot be
    planned with: unreadable network performance (skipped) or a GPU the GPU table does not know (kept,
    but with no flops, so never a trainer)."""
    types: dict[str, InstanceType] = {}
    skipped: list[str] = []
    no_flops: list[str] = []
    filters = [{"Name": "instance-type", "Values": type_name_patterns()}]
    for info in paginate(ec2, "describe_instance_types", "InstanceTypes", Filters=filters):
        if not is_wanted(info["InstanceType"]):
            continue
        instance = instance_type_from_aws(info)
        if instance is None:
            skipped.append(f"{info['InstanceType']} (network {info['NetworkInfo']['NetworkPerformance']!r})")
        else:
            types[instance.name] = instance
            if instance.gpu_count and not instance.flops:
                no_flops.append(f"{instance.name} ({instance.gpu_model})")
    warnings = []
    if skipped:
        warnings.append(f"skipped types with unreadable specs: {', '.join(sorted(skipped))}")
    if no_flops:
        warnings.append(
            f"GPU models missing from provisioning/catalog/data/gpus.json, so not used as trainers: "
            f"{', '.join(sorted(no_flops))}"
        )
    return Catalog(types=types, prices=[]), warnings
