"""The DeepVM paper's simulation, re-implemented from its description as the baseline to beat.

The paper (solution/simulation.py of its repository) decides by exhaustive search over a catalog in
its own JSON format: every GPU type v, every CPU type w, every n and m in 1..255, keeps the
configurations that satisfy its three constraints and returns the largest Z. Its baselines are
cost-first and performance-first Single Anchor clusters, and DeepVM without the scaling factor.

`exhaustive_search` is the literal search (about 5 million checks per price); `pruned_search` visits the
same configurations but stops each m loop at the first feasible m, since Z does not depend on m and a
larger m only costs more — the same answer, fast enough to run at every price in the test suite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SATURATION = {0.3: 2, 1.7: 12, 5: 16, 10: 20, 12.5: 24, 15: 24, 25: 28, 30: 32}
MAX_LIMIT = 256  # n and m range over 1..255


@dataclass(frozen=True)
class PaperConfig:
    z: float
    gpu: dict[str, Any]
    n: int
    holder: dict[str, Any] | None = None  # Tiering's CPU type; None for Single Anchor
    m: int = 0


def _k(v: dict[str, Any], n: float) -> float:
    a, b, c = v["a"], v["b"], v["c"]

    def s(x: float) -> float:
        return c / (1 + math.exp(-a * (x - b)))

    if n <= b:
        return 1.0
    tangent = c * a / 4 * (n - b) + s(b)  # S'(b) = c a / 4
    return s(n) / tangent


def flopp(v: dict[str, Any]) -> float:
    return v.get("flops", 0) / v["spot_price"] * 3600


def z_value(v: dict[str, Any], n: int, scaling: bool = True) -> float:
    return flopp(v) * n * (_k(v, n) if scaling else 1.0)


def performance(v: dict[str, Any], n: int) -> float:
    """Effective FLOPS of n nodes of v: flops n K(n)."""
    return v["flops"] * n * _k(v, n)


def _split(data: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    gpus = [i for i in data["instances"] if i["type"] in ("G", "P")]
    cpus = [i for i in data["instances"] if i["type"] not in ("G", "P")]
    return gpus, cpus


def _tiering_ok(v, w, n, m, price, buffer_size, checkpoint_size) -> bool:
    return (
        v["spot_price"] * n + w["ondemand_price"] * m <= price
        and w["memory"] >= checkpoint_size * buffer_size
        and n / m < SATURATION[min(v["network_bandwidth"], w["network_bandwidth"])]
    )


def _best(configs: list[PaperConfig]) -> PaperConfig | None:
    best = None
    for config in configs:  # first of equal Z wins, as the paper's stable sort does
        if best is None or config.z > best.z:
            best = config
    return best


def _single_anchor(gpus, price, scaling) -> list[PaperConfig]:
    return [
        PaperConfig(z_value(v, n, scaling), v, n)
        for v in gpus
        for n in range(2, MAX_LIMIT)
        if v["spot_price"] * (n - 1) + v["ondemand_price"] <= price
    ]


def exhaustive_search(data, price, buffer_size, checkpoint_size, scaling=True) -> PaperConfig | None:
    gpus, cpus = _split(data)
    tiering = [
        PaperConfig(z_value(v, n, scaling), v, n, w, m)
        for v in gpus
        for w in cpus
        for n in range(1, MAX_LIMIT)
        for m in range(1, MAX_LIMIT)
        if _tiering_ok(v, w, n, m, price, buffer_size, checkpoint_size)
    ]
    return _pick(_best(tiering), _best(_single_anchor(gpus, price, scaling)))


def pruned_search(data, price, buffer_size, checkpoint_size, scaling=True) -> PaperConfig | None:
    gpus, cpus = _split(data)
    tiering = []
    for v in gpus:
        for w in cpus:
            for n in range(1, MAX_LIMIT):
                m = n // SATURATION[min(v["network_bandwidth"], w["network_bandwidth"])] + 1
                if m < MAX_LIMIT and _tiering_ok(v, w, n, m, price, buffer_size, checkpoint_size):
                    tiering.append(PaperConfig(z_value(v, n, scaling), v, n, w, m))
    return _pick(_best(tiering), _best(_single_anchor(gpus, price, scaling)))


def _pick(tiering: PaperConfig | None, anchor: PaperConfig | None) -> PaperConfig | None:
    if tiering is None or anchor is None:
        return tiering or anchor
    return tiering if tiering.z > anchor.z else anchor


def cost_first(data, price) -> tuple[dict[str, Any], int] | None:
    best, best_n = None, 0
    for v in _split(data)[0]:
        if price >= v["ondemand_price"] + v["spot_price"]:
            spot = int((price - v["ondemand_price"]) // v["spot_price"])
            if spot * v["spot_price"] + v["ondemand_price"] <= price and spot + 1 > best_n:
                best, best_n = v, spot + 1
    return (best, best_n) if best_n >= 2 else None


def performance_first(data, price) -> tuple[dict[str, Any], int] | None:
    for v in sorted(_split(data)[0], key=lambda i: i["flops"], reverse=True):
        if price >= v["ondemand_price"] + v["spot_price"]:
            spot = max(int((price - v["ondemand_price"]) // v["spot_price"]), 1)
            if spot * v["spot_price"] + v["ondemand_price"] <= price:
                return v, spot + 1
    return None
