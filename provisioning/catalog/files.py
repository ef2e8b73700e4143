"""Catalog files given with `--catalog FILE`: DeepVM's format (the paper's data.json) or deepvm's own.

DeepVM's format is one flat list of instance types with a type letter each, one on-demand and one spot
price, and vCPU quotas per letter and market:

    {"instances": [{"name", "type": "G", "ondemand_price", "spot_price", "vCPU", "memory"?,
                    "network_bandwidth" (Gbps), "flops"? (GPU types), "a"?, "b"?, "c"?}],
     "available_vcpus": {"G": {"ondemand": 32, "spot": 128}, ...}}

It knows no regions, so an imported file becomes one region `deepvm` with one availability zone
`deepvm-a` that carries the spot prices. Quotas stay per letter as DeepVM applies them: the quota group
of each type is its letter. Letters G and P are GPU trainers (one GPU each; the file does not name the
GPU model, so `gpu_model` stays None); every other letter is a CPU checkpoint holder. `flops` keep the
file's units, and a/b/c become measured scaling parameters.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from provisioning.catalog.json_form import CatalogFormatError, FieldReader, catalog_from_dict
from provisioning.catalog.model import Catalog, InstanceType, Market, Price, Quota, ScalingParams
from provisioning.core.errors import InputError
from provisioning.core.inputfile import MIB
from provisioning.core.jsonfile import read_json_file

DEEPVM_REGION = "deepvm"
DEEPVM_ZONE = "deepvm-a"
GPU_LETTERS = frozenset({"G", "P"})


MAX_CATALOG_BYTES = 64 * MIB  # the built-in snapshot of four regions is 47 KiB; every AWS region is a few MiB


def load_catalog_file(path: Path) -> Catalog:
    """Read a catalog file in either format. Every problem a user can cause is one InputError line."""
    data = read_json_file(path, "catalog file", MAX_CATALOG_BYTES)
    source = os.path.abspath(path)  # plans name their catalog by it, and `up` may run in another directory
    try:
        if isinstance(data, dict) and "instances" in data:
            catalog = from_deepvm_dict(data, source=source, as_of=_modified_date(path))
        elif isinstance(data, dict) and "types" in data:
            catalog = catalog_from_dict(data, source=source)
        else:
            raise InputError(
                f'{path} is not a catalog: expected DeepVM\'s format ("instances", "available_vcpus") '
                'or deepvm\'s ("types", "prices")'
            )
    except CatalogFormatError as exc:
        raise InputError(f"{path}: {exc}") from None
    if not catalog.gpu_types():
        raise InputError(f"{path} has no GPU instance types (DeepVM's format marks them with type G or P)")
    return catalog


def _modified_date(path: Path) -> str:
    """DeepVM's files carry no date; the file's modification day is the best 'as of' there is."""
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc).date().isoformat()


def from_deepvm_dict(data: dict[str, Any], *, source: str, as_of: str = "") -> Catalog:
    """A Catalog from DeepVM's format; a problem is a CatalogFormatError naming the entry and field."""
    instances = data.get("instances")
    if not isinstance(instances, list):
        raise CatalogFormatError('"instances" must be a list of instance types')
    types: dict[str, InstanceType] = {}
    prices: list[Price] = []
    for index, raw in enumerate(instances):
        field = FieldReader(raw, f"instances[{index}]")
        instance = _instance_type(field)
        if instance.name in types:
            raise CatalogFormatError(f"instances[{index}]: instance type {instance.name!r} is listed twice")
        types[instance.name] = instance
        on_demand, spot = field.price("ondemand_price"), field.price("spot_price")
        prices.append(Price(instance.name, DEEPVM_REGION, None, Market.ON_DEMAND, on_demand))
        prices.append(Price(instance.name, DEEPVM_REGION, DEEPVM_ZONE, Market.SPOT, spot))
    return Catalog(
        types=types, prices=prices, quotas=_quotas(data.get("available_vcpus", {})), source=source, as_of=as_of
    )


def _instance_type(field: FieldReader) -> InstanceType:
    name = field.name("name")
    letter = field.text("type").upper()
    is_gpu = letter in GPU_LETTERS
    scaling = None
    if is_gpu and all(key in field.raw for key in ("a", "b", "c")):
        scaling = ScalingParams(field.number("a"), field.number("b"), field.number("c"), measured=True)
    return InstanceType(
        name=name,
        quota_group=letter,
        vcpus=field.whole("vCPU"),
        memory_gib=field.number("memory", default=None),
        network_gbps=field.number("network_bandwidth"),
        gpu_model=None,
        gpu_count=1 if is_gpu else 0,
        flops=field.number("flops") if is_gpu else 0.0,
        scaling=scaling,
    )


def _quotas(available: Any) -> list[Quota]:
    if not isinstance(available, dict):
        raise CatalogFormatError('"available_vcpus" must map type letters to {"ondemand", "spot"}')
    quotas = []
    for letter, by_market in available.items():
        field = FieldReader(by_market, f"available_vcpus.{letter}")
        for key, market in (("ondemand", Market.ON_DEMAND), ("spot", Market.SPOT)):
            if key in field.raw:
                quotas.append(Quota(DEEPVM_REGION, str(letter).upper(), market, field.number(key)))
    return quotas
