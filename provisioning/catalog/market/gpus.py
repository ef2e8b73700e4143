"""The GPU table (provisioning/catalog/data/gpus.json): dense FP16/BF16 tensor TFLOPS per GPU model, with sources.

An instance's flops are this figure times its GPU count, so that FLOPP compares instance types on the
number that matters for mixed-precision training.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=1)
def gpu_table() -> dict[str, dict[str, object]]:
    text = resources.files("provisioning.catalog").joinpath("data/gpus.json").read_text(encoding="utf-8")
    return json.loads(text)["gpus"]


def gpu_tflops(model: str | None) -> float:
    """Dense tensor TFLOPS of one GPU, 0.0 for a model the table does not know."""
    entry = gpu_table().get(model or "")
    return float(entry["tflops"]) if entry else 0.0  # type: ignore[arg-type]


def canonical_gpu_model(aws_name: str, memory_mib: int | None) -> str:
    """The table's name for a GPU that EC2 reports as `aws_name` with `memory_mib` of memory.

    EC2 calls both A100 parts "A100"; the table tells them apart by memory ("A100-40GB").
    """
    table = gpu_table()
    if aws_name in table:
        return aws_name
    if memory_mib:
        sized = f"{aws_name}-{round(memory_mib / 1024)}GB"
        if sized in table:
            return sized
    return aws_name
