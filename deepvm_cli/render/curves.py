"""Which scaling curve each GPU type was planned with: a profile's (`deepvm plan --profile`) or a default.

A plan is only as good as the curve behind it, so the output names it: the profiles, with their
parameters and how far they are trusted, and for every other type the default it fell back to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from provisioning.catalog.model import Catalog
from provisioning.scaling.model import curve_source, scaling_of

if TYPE_CHECKING:  # pydantic is imported only when a profile is read
    from provisioning.scaling.profile import Parameter, Profile

_SOURCE_LABEL = {
    "catalog": "the catalog's own curve",
    "deepvm": "DeepVM's ResNet-18 fit (default)",
    "default": "the default curve",
}


@dataclass(frozen=True)
class ProfileUsed:
    """A profile given to `deepvm plan --profile`, and its file as given."""

    path: str
    profile: Profile


def curves_json(types: Sequence[str], catalog: Catalog, profiles: Sequence[ProfileUsed]) -> list[dict[str, Any]]:
    """For each of `types`: where its curve came from ("profile", "catalog", "deepvm", "default"), the
    profile's file, the curve, how it is read ("speedup" for a profile, "deepvm": through K(n)) and the
    most nodes a plan may hold with it."""
    by_type = {used.profile.instance_type: used for used in profiles}
    rows = []
    for name in types:
        curve = scaling_of(catalog.types[name])
        used = by_type.get(name)
        rows.append(
            {
                "instance_type": name,
                "source": "profile" if used else curve_source(catalog.types[name]),
                "profile": used.path if used else None,
                "a": curve.a,
                "b": curve.b,
                "c": curve.c,
                "model": curve.model.value,
                "max_nodes": curve.max_nodes,
            }
        )
    return rows


def curves_lines(
    types: Sequence[str], planned: Sequence[str], catalog: Catalog, profiles: Sequence[ProfileUsed]
) -> list[str]:
    """Lines for the terminal: every profile, the curve of each other type in the plans, and a count of
    the remaining types (all on defaults)."""
    by_type = {used.profile.instance_type: used for used in profiles}
    lines = [line for used in profiles for line in _profile_lines(used)]
    others = [name for name in dict.fromkeys(planned) if name not in by_type]
    lines += [f"{name}: {_SOURCE_LABEL[curve_source(catalog.types[name])]}" for name in others]
    rest = len([name for name in types if name not in by_type and name not in others])
    if rest:
        lines.append(f"{rest} other GPU type{'s' if rest != 1 else ''}: defaults")
    return lines


def _profile_lines(used: ProfileUsed) -> list[str]:
    profile = used.profile
    fit = profile.fit
    sizes = [s.nodes for s in profile.sizes]
    return [
        f"{profile.instance_type}: profile {used.path} ({profile.job.name}, {len(sizes)} sizes from 1 to "
        f"{sizes[-1]} nodes, {profile.measured_at[:10]})",
        f"  a = {estimate_text(fit.a)}, b = {estimate_text(fit.b)}, c = {estimate_text(fit.c)}, "
        f"RMSE {fit.rmse:.3f}; at most {profile.node_bound} nodes",
    ]


def estimate_text(parameter: Parameter) -> str:
    """A fitted parameter as "value ± sd" (the value alone when the points cannot tell its uncertainty)."""
    return f"{parameter.value:.4g}" + ("" if parameter.sd is None else f" ± {parameter.sd:.2g}")
