"""Fitting DeepVM's logistic speed-up S(n) = c / (1 + exp(-a (n - b))) to measured speed-ups.

A profile (`deepvm profile`) measures a job's speed-up on 1..N nodes of one instance type; this module
turns those points into the curve the planner uses, and says how far the curve can be trusted:

- a, b and c by least squares (scipy's curve_fit, trust-region reflective with a > 0 and c > 0: a
  falling or flat curve would make the planner's K(n) meaningless), from several starting points, the
  best kept;
- each parameter's uncertainty, one standard deviation from the covariance of the fit (the square root
  of its diagonal, scaled by the residuals). With no more points than parameters the curve passes
  through every point and the data say nothing about the uncertainty: it is then None;
- the RMSE of the fitted curve on the points, and the largest node count measured (beyond it the curve
  is an extrapolation: see profile.py for how far the planner follows it).

It also says when the points do not look like a logistic curve, since a plan built on such a fit buys
the wrong nodes (a profile records these warnings):
- the mean speed-up falls by more than DROP_WARN_SHARE as nodes are added (DeepVM's own g5 data fall by
  half from 1 to 2 nodes; smaller drops, such as g4dn's 4% from 28 to 32 nodes, are measurement noise);
- the RMSE is above RMSE_WARN_SHARE of the largest speed-up measured;
- fewer distinct node counts than parameters + 1.

scipy and numpy are imported inside `fit_speedup`: `deepvm plan` evaluates curves (scaling.py) and
must not pay for either.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean

from provisioning.catalog.model import ScalingParams
from provisioning.core.errors import JobFailed
from provisioning.scaling.model import speedup

DROP_WARN_SHARE = 0.05
RMSE_WARN_SHARE = 0.10  # DeepVM's own least-squares fits stay within 3.3% (g3s), 2.4% (g4dn), 5.2% (g5)
_PARAMETERS = 3


class FitError(JobFailed):
    """No logistic curve could be fitted to the points (the least-squares search did not converge)."""


@dataclass(frozen=True)
class Estimate:
    """A fitted parameter and its uncertainty."""

    value: float
    sd: float | None  # one standard deviation; None when the points cannot tell (no more than 3 of them)


@dataclass(frozen=True)
class ScalingFit:
    """The curve fitted to measured speed-ups, and how well it fits them."""

    a: Estimate  # steepness
    b: Estimate  # inflection point, in nodes
    c: Estimate  # the speed-up the curve tends to
    rmse: float  # root-mean-square error of the curve on the points, in speed-up
    max_nodes: int  # the largest node count measured
    warnings: tuple[str, ...]  # why the curve may not describe the job (see the module docstring)

    @property
    def params(self) -> ScalingParams:
        return ScalingParams(a=self.a.value, b=self.b.value, c=self.c.value)


def rmse(params: ScalingParams, points: Sequence[tuple[float, float]]) -> float:
    """Root-mean-square error of S(n) on (nodes, speed-up) points."""
    return math.sqrt(fmean((s - speedup(params, n)) ** 2 for n, s in points))


def fit_speedup(points: Sequence[tuple[float, float]]) -> ScalingFit:
    """Least-squares fit of S(n) to (nodes, speed-up) points; several points may share a node count
    (repeated measurements). FitError when no start converges."""
    if len({n for n, _ in points}) < 2:
        raise FitError("fitting a speed-up curve needs measurements at two node counts at least")
    import numpy as np
    from scipy.optimize import OptimizeWarning, curve_fit

    nodes = np.array([n for n, _ in points], dtype=float)
    speedups = np.array([s for _, s in points], dtype=float)

    def logistic(n: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
        with np.errstate(over="ignore"):  # exp overflows far below b: S is 0 there, as 1 / inf says
            return c / (1.0 + np.exp(-a * (n - b)))

    fits: list[_Solution] = []
    for start in _starts(points):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OptimizeWarning)  # "covariance could not be estimated": handled
                found, covariance = curve_fit(
                    logistic,
                    nodes,
                    speedups,
                    p0=start,
                    maxfev=20_000,
                    bounds=([1e-9, -np.inf, 1e-9], [np.inf, np.inf, np.inf]),
                )
        except (RuntimeError, ValueError):  # no convergence from this start
            continue
        error = float(np.sum((speedups - logistic(nodes, *found)) ** 2))
        if math.isfinite(error):
            fits.append(_Solution(error, tuple(float(v) for v in found), covariance.tolist()))
    if not fits:
        shown = ", ".join(f"S({n:g}) = {s:.3g}" for n, s in points)
        raise FitError(f"no logistic curve fits the measured speed-ups ({shown})")
    chosen = _steepest_of_the_best(fits)
    sds = [_sd(chosen.covariance, i) if len(points) > _PARAMETERS else None for i in range(_PARAMETERS)]
    estimates = [Estimate(value, sd) for value, sd in zip(chosen.values, sds)]
    params = ScalingParams(*(e.value for e in estimates))
    error = rmse(params, points)
    return ScalingFit(
        a=estimates[0],
        b=estimates[1],
        c=estimates[2],
        rmse=error,
        max_nodes=int(max(n for n, _ in points)),
        warnings=_warnings(points, error),
    )


@dataclass(frozen=True)
class _Solution:
    """Where one start of the least-squares search ended."""

    squared_error: float
    values: tuple[float, ...]  # a, b, c
    covariance: list[list[float]]


def _steepest_of_the_best(fits: list[_Solution]) -> _Solution:
    """The fit of least squared error; among fits as good, the steepest (largest a).

    Points that do not grow (a job that does not scale) are fitted equally well by a flat curve (a -> 0,
    S = c / 2 everywhere) and by a steep one that has levelled off before the first node (b < 1). Read
    as a speed-up (how the planner reads a profile's curve) both say the same; read through DeepVM's
    K(n), measured against the tangent at b, the flat one counts every node as fully used and the steep
    one as nearly useless. The steep one is what such a job does, however the curve is read.
    """
    least = min(fit.squared_error for fit in fits)
    tied = [fit for fit in fits if fit.squared_error <= least * (1 + 1e-6) + 1e-12]
    return max(tied, key=lambda fit: fit.values[0])


def _starts(points: Sequence[tuple[float, float]]) -> list[tuple[float, float, float]]:
    """Starting points: DeepVM's shapes (inflection mid-range), an early plateau, a late one, and a curve
    levelled off before the first node (see _steepest_of_the_best)."""
    top, most, least = max(s for _, s in points), max(n for n, _ in points), min(n for n, _ in points)
    return [(0.1, most / 2, top), (1.0, 1.0, top), (0.1, most, 2 * top), (0.5, most / 4, top), (5.0, least - 3, top)]


def _sd(covariance: Sequence[Sequence[float]], i: int) -> float | None:
    variance = float(covariance[i][i])
    return math.sqrt(variance) if math.isfinite(variance) and variance >= 0 else None


def _warnings(points: Sequence[tuple[float, float]], error: float) -> tuple[str, ...]:
    by_count: dict[float, list[float]] = {}
    for n, s in points:
        by_count.setdefault(n, []).append(s)
    means = sorted((n, fmean(s)) for n, s in by_count.items())
    found = []
    falls = [(n0, s0, n1, s1) for (n0, s0), (n1, s1) in itertools.pairwise(means) if s1 < s0 * (1 - DROP_WARN_SHARE)]
    if falls:
        n0, s0, n1, s1 = falls[0]
        more = f" (and {len(falls) - 1} more drops)" if len(falls) > 1 else ""
        found.append(
            f"the speed-up falls from {s0:.3g} on {_nodes(n0)} to {s1:.3g} on {_nodes(n1)}{more}: not a logistic curve"
        )
    top = max(s for _, s in means)
    if error > RMSE_WARN_SHARE * top:
        found.append(
            f"the curve misses the measurements by {error:.3g} (RMSE), over {RMSE_WARN_SHARE:.0%} of "
            f"the largest speed-up ({top:.3g})"
        )
    if len(means) <= _PARAMETERS:
        found.append(
            f"{len(means)} node counts fix the 3 parameters exactly: the curve's shape beyond "
            f"{_nodes(means[-1][0])} is a guess; measure more sizes"
        )
    return tuple(found)


def _nodes(count: float) -> str:
    return f"{count:g} node" + ("" if count == 1 else "s")
