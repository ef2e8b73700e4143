"""The planning flags `deepvm plan` and `deepvm simulate` share: one definition each, with its rule.

A flag's rule (deepvm_cli/ui/flags.py) runs while the command line is parsed, so a bad value is refused the
same way, with the same line, whichever command it was given to.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from deepvm_cli.render.curves import ProfileUsed
from deepvm_cli.ui import console
from deepvm_cli.ui.flags import MAX_PRICE, at_least, positive, region_list

if TYPE_CHECKING:
    from provisioning.catalog.model import Catalog

MAX_HOURS = 100_000.0  # --deadline: eleven years
MAX_WORK_PFLOP = 1e12  # --work: a thousand times the largest published training run
MAX_CHECKPOINT_GIB = 100_000.0  # --checkpoint-size
MAX_BUFFER_SLOTS = 64
MAX_NODES = 4096  # --node-limit: the planner's own bound on nodes of one type (planner/options.py)

max_price_option = typer.Option(
    None, "--max-price", callback=positive(MAX_PRICE), help="Price cap for the cluster, USD per hour."
)
region_option = typer.Option(None, "--region", callback=region_list, help="Region, comma-separated regions, or 'all'.")
catalog_option = typer.Option(None, "--catalog", help="Plan on this catalog file alone (no AWS).")
checkpoint_size_option = typer.Option(
    0.5, "--checkpoint-size", callback=at_least(0, MAX_CHECKPOINT_GIB), help="One checkpoint, GiB."
)
buffer_slots_option = typer.Option(
    2, "--buffer-slots", callback=positive(MAX_BUFFER_SLOTS), help="Checkpoints the holders keep in RAM."
)
node_limit_option = typer.Option(
    None, "--node-limit", callback=positive(MAX_NODES), help="N nodes per type and market, not quotas."
)
mix_option = typer.Option(False, "--mix", help="Allow several GPU types in one cluster.")
offline_option = typer.Option(False, "--offline", help="Use the built-in price snapshot.")
refresh_option = typer.Option(False, "--refresh", help="Ignore cached AWS market data.")
profile_option: list[Path] = typer.Option(
    None,
    "--profile",
    metavar="FILE",
    help="A profile from `deepvm profile`: its fitted curve replaces its instance type's in every objective, "
    "up to 1.5x the most nodes it measured (repeat for other types).",
)


def regions(region: str | None) -> tuple[str, ...] | None:
    """`--region` as names (None: the default region); region_list has already refused an empty one."""
    if region is None:
        return None
    return tuple(r.strip() for r in region.split(",") if r.strip())


def with_profiles(paths: list[Path], catalog: Catalog) -> tuple[Catalog, list[ProfileUsed]]:
    """The catalog with the profiles' curves, and the profiles (each read strictly and checked against the
    catalog); their warnings shown."""
    if not paths:
        return catalog, []
    from provisioning.scaling.profile import load_profile
    from provisioning.scaling.profile import with_profiles as apply

    used = [ProfileUsed(str(path), load_profile(path, catalog)) for path in paths]
    profiled = apply(catalog, [u.profile for u in used])
    for profile in used:
        for message in profile.profile.warnings:
            console.warning(f"{profile.path} ({profile.profile.instance_type}): {message}")
    return profiled, used
