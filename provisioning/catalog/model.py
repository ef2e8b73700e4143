"""The instance catalog: what each EC2 instance type is, what it costs where, and the account's quotas.

Every price source (the built-in snapshot, DeepVM's JSON format, live AWS) produces one `Catalog`; the
planner reads nothing else. Prices are kept with the time they were observed so that a plan can say how
fresh the numbers behind it are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property


class Market(str, Enum):
    """How an instance is bought."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"


# AWS's vCPU quota groups (Service Quotas, EC2). The letters are the instance-family initials each covers.
QUOTA_GROUP_LETTERS: dict[str, str] = {
    "Standard": "ACDHIMRTZ",
    "G and VT": "GV",
    "P": "P",
    "F": "F",
    "Inf": "",
    "Trn": "",
    "DL": "",
    "X": "X",
}


P5_SPOT_GROUP = "P5"  # the spot quota of P5, P5e and P5en (quota_group_in_market)


def quota_group_in_market(instance_type: str, quota_group: str, market: Market) -> str:
    """The vCPU quota group a type of `quota_group` counts against in `market`: the same but for P5 Spot
    Instances, which have their own quota ("All P5 Spot Instance Requests") while on-demand P5 share
    "Running On-Demand P instances" with P2-P4 (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/
    using-spot-limits.html)."""
    if market is Market.SPOT and quota_group == "P" and instance_type.lower().startswith("p5"):
        return P5_SPOT_GROUP
    return quota_group


def quota_group_of(instance_type: str) -> str:
    """The vCPU quota group an instance type counts against, from its family name (e.g. g5 -> G and VT)."""
    family = instance_type.split(".", 1)[0].lower()
    for prefix, group in (("inf", "Inf"), ("trn", "Trn"), ("dl", "DL"), ("vt", "G and VT")):
        if family.startswith(prefix):
            return group
    initial = family[:1].upper()
    for group, letters in QUOTA_GROUP_LETTERS.items():
        if initial and initial in letters:
            return group
    return "Standard"


class ScalingModel(str, Enum):
    """How a curve turns n nodes into nodes' worth of throughput (provisioning/scaling/model.py)."""

    DEEPVM = "deepvm"  # n K(n): DeepVM's factor, K = 1 up to the inflection point b (the paper's decisions)
    SPEEDUP = "speedup"  # S(n) itself, at most linear: a profile's measured speed-up of the job


@dataclass(frozen=True)
class ScalingParams:
    """Logistic speed-up S(n) = c / (1 + exp(-a (n - b))) fitted to measured multi-node training.

    `measured` is False when the values are defaults rather than a fit to this instance type.
    `max_nodes` bounds how many nodes of the type a plan may hold when the curve was fitted on few nodes
    (a profile's: see provisioning/scaling/profile.py), since a logistic curve extrapolates badly.
    `model` says whether the planner reads the curve through DeepVM's K(n) or as the speed-up itself
    (a profile's: see provisioning/scaling/model.py for why).
    """

    a: float
    b: float
    c: float
    measured: bool = True
    max_nodes: int | None = None  # None: the curve holds for any count
    model: ScalingModel = ScalingModel.DEEPVM


# Used for GPU types without a fit of their own: the ResNet-18 fit of g4dn.xlarge (the most common
# trainer in the paper's measurements), see provisioning/scaling/model.py and datasets' scaling_resnet18.csv.
DEFAULT_SCALING = ScalingParams(a=0.1339, b=12.87, c=6.177, measured=False)


@dataclass(frozen=True)
class InstanceType:
    """One EC2 instance type, independent of where and how it is bought."""

    name: str  # e.g. "g5.xlarge"
    quota_group: str  # "Standard", "G and VT", "P", ... (vCPU quotas are per group and market)
    vcpus: int
    memory_gib: float | None  # None when the source does not say (DeepVM's simulated GPU types)
    network_gbps: float  # sustained ("up to" values taken at their peak, as AWS and DeepVM do)
    gpu_model: str | None = None  # "T4", "A10G", ... None for CPU types
    gpu_count: int = 0
    flops: float = 0.0  # TFLOPS per instance (dense FP16/BF16 tensor x GPU count); source units on import
    scaling: ScalingParams | None = None  # None for CPU types

    @property
    def is_gpu(self) -> bool:
        return self.gpu_count > 0 and self.flops > 0

    def quota_group_in(self, market: Market) -> str:
        """The vCPU quota group the type counts against in `market` (see `quota_group_in_market`)."""
        return quota_group_in_market(self.name, self.quota_group, market)


@dataclass(frozen=True)
class Price:
    """An hourly price for one instance type in one place and market.

    On-demand prices are regional (`availability_zone` is None); spot prices are per availability zone.
    """

    instance_type: str
    region: str
    availability_zone: str | None
    market: Market
    usd_per_hour: float


@dataclass(frozen=True)
class Quota:
    """A vCPU quota: how many vCPUs of one quota group may run in one region and market."""

    region: str
    quota_group: str
    market: Market
    vcpus: float


@dataclass
class Catalog:
    """Instance types, prices and quotas from one source, with where and when they came from."""

    types: dict[str, InstanceType]
    prices: list[Price]
    quotas: list[Quota] = field(default_factory=list)
    source: str = "unknown"  # "snapshot", "aws", or the path of an imported file
    as_of: str = ""  # ISO date (or timestamp) the prices were observed
    warnings: list[str] = field(default_factory=list)  # e.g. why the snapshot stands in for live data

    @cached_property
    def regions(self) -> list[str]:
        return sorted({p.region for p in self.prices})

    def gpu_types(self) -> list[InstanceType]:
        return [t for t in self.types.values() if t.is_gpu]

    def cpu_types(self) -> list[InstanceType]:
        return [t for t in self.types.values() if not t.is_gpu]

    # Lookups go through indexes built once: the planner asks these questions thousands of times.
    # (A catalog is not changed after it is built; `restricted_to` makes a new one.)

    @cached_property
    def _on_demand_index(self) -> dict[tuple[str, str], float]:
        return {(p.instance_type, p.region): p.usd_per_hour for p in self.prices if p.market is Market.ON_DEMAND}

    @cached_property
    def _spot_index(self) -> dict[tuple[str, str], dict[str, float]]:
        index: dict[tuple[str, str], dict[str, float]] = {}
        for p in self.prices:
            if p.market is Market.SPOT:
                index.setdefault((p.instance_type, p.region), {})[p.availability_zone or p.region] = p.usd_per_hour
        return index

    @cached_property
    def _quota_index(self) -> dict[tuple[str, str, Market], float]:
        return {(q.region, q.quota_group, q.market): q.vcpus for q in self.quotas}

    def on_demand_price(self, instance_type: str, region: str) -> float | None:
        return self._on_demand_index.get((instance_type, region))

    def spot_prices(self, instance_type: str, region: str) -> dict[str, float]:
        """Spot price per availability zone (empty when the type has no spot offer there)."""
        return dict(self._spot_index.get((instance_type, region), {}))

    def quota(self, region: str, quota_group: str, market: Market) -> float | None:
        """The vCPU quota, or None when the source does not know it (then no quota limit applies)."""
        return self._quota_index.get((region, quota_group, market))

    def restricted_to(self, regions: Iterable[str]) -> Catalog:
        """The same catalog limited to some regions."""
        keep = set(regions)
        return Catalog(
            types=self.types,
            prices=[p for p in self.prices if p.region in keep],
            quotas=[q for q in self.quotas if q.region in keep],
            source=self.source,
            as_of=self.as_of,
            warnings=list(self.warnings),
        )
