"""Which EC2 instance families deepvm considers, shared by the snapshot and the live AWS fetch.

Fetching only these keeps live calls fast and the catalog readable: GPU families people train on, and
CPU families that make good checkpoint holders (network bandwidth and RAM per dollar).
"""

from __future__ import annotations

GPU_FAMILIES: tuple[str, ...] = ("g4dn", "g5", "g6", "g6e", "p3", "p4d", "p5")
HOLDER_FAMILIES: tuple[str, ...] = ("c5", "c5n", "c6i", "c6in", "m5", "m6i", "r6i", "t3", "d3")
# Holders smaller than xlarge have too little RAM for a checkpoint ring buffer; larger ones only add
# cost per node. GPU families keep every size (1 to 8 GPUs).
HOLDER_SIZES: tuple[str, ...] = ("xlarge", "2xlarge", "4xlarge")


def family_of(instance_type: str) -> str:
    return instance_type.split(".", 1)[0]


def is_wanted(instance_type: str) -> bool:
    """True for every size of a GPU family and for the holder sizes of a holder family."""
    family, _, size = instance_type.partition(".")
    return family in GPU_FAMILIES or (family in HOLDER_FAMILIES and size in HOLDER_SIZES)


def type_name_patterns() -> list[str]:
    """Wildcards for EC2's `instance-type` filter that cover every wanted type (and a few more)."""
    return [f"{f}.*" for f in GPU_FAMILIES] + [f"{f}.{s}" for f in HOLDER_FAMILIES for s in HOLDER_SIZES]
