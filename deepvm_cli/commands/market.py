"""`deepvm market` (alias `deepvm catalog`): prices, FLOPP and vCPU quotas per instance type and region."""

from __future__ import annotations

from pathlib import Path

import typer
from rich import box
from rich.table import Table

from deepvm_cli.ui import console
from deepvm_cli.ui.flags import region_list
from deepvm_cli.ui.user_config import Defaults
from provisioning.catalog.market.summary import MarketRow, market_rows
from provisioning.catalog.model import Catalog, InstanceType
from provisioning.catalog.snapshot import snapshot_label, snapshot_notes
from provisioning.catalog.sources import resolve_catalog, save_live_snapshot

HELP = "Show instance types with their prices, FLOPP (flops per dollar) and vCPU quotas."


def market(
    gpu: str | None = typer.Option(None, "--gpu", help="Only this GPU model, e.g. T4, A10G, L4, A100."),
    region: list[str] | None = typer.Option(
        None,
        "--region",
        callback=region_list,
        help="A region, or 'all' (repeatable or comma-separated). Default: your AWS region.",
    ),
    offline: bool = typer.Option(False, "--offline", help="Use the built-in price snapshot; no AWS calls."),
    catalog_file: Path | None = typer.Option(
        None, "--catalog", help="Use this catalog file alone (DeepVM's data.json format or deepvm's)."
    ),
    refresh: bool = typer.Option(False, "--refresh", help="Ignore cached live AWS data."),
    holders: bool = typer.Option(False, "--holders", help="Also list CPU checkpoint-holder types."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
    save_snapshot: Path | None = typer.Option(
        None, "--save-snapshot", help="Write the live AWS catalog to FILE in the built-in snapshot's form."
    ),
) -> None:
    if region is None and catalog_file is None:  # a catalog file's regions are its own
        defaults = Defaults()
        configured = defaults.fill(None, "region")
        region = [configured] if configured else None
        defaults.announce()
    regions = _split_regions(region)
    if save_snapshot is not None:
        saved = save_live_snapshot(save_snapshot, regions=regions, refresh=refresh)
        _print_warnings(saved)
        regions_saved = ", ".join(saved.regions)
        console.info(f"saved {len(saved.types)} instance types in {regions_saved} to {save_snapshot}")
        return
    catalog = resolve_catalog(regions=regions, offline=offline, catalog_file=catalog_file, refresh=refresh)
    rows = market_rows(catalog, gpu=gpu, holders=holders or as_json)
    _print_warnings(catalog)
    if as_json:
        console.print_json(_document(catalog, rows))
        return
    if catalog.source == "snapshot":
        hint = " (run without --offline for live prices)" if offline else ""
        console.info(f"prices: {snapshot_label(catalog)}; its spot prices are estimates{hint}")
    _render(catalog, rows, holders)


def _split_regions(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _print_warnings(catalog: Catalog) -> None:
    for message in catalog.warnings:
        console.warning(message)


def _source_line(catalog: Catalog) -> str:
    if catalog.source == "snapshot":
        return snapshot_label(catalog)
    if catalog.source == "aws":
        return f"live AWS prices as of {catalog.as_of}"
    return f"{catalog.source} (as of {catalog.as_of})" if catalog.as_of else catalog.source


def _document(catalog: Catalog, rows: list[MarketRow]) -> dict:
    return {
        "source": catalog.source,
        "as_of": catalog.as_of,
        "notes": snapshot_notes() if catalog.source == "snapshot" else [],
        "warnings": list(catalog.warnings),
        "instance_types": [row.to_json() for row in rows],
    }


def _money(usd: float | None) -> str:
    return "-" if usd is None else f"{usd:.4f}"


def _short(value: float | None) -> str:
    """FLOPP values run to millions; three significant digits are what a reader compares."""
    if value is None:
        return "-"
    for divisor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= divisor:
            return f"{value / divisor:.3g}{suffix}"
    return f"{value:.3g}"


def _quota_line(catalog: Catalog, region: str) -> str:
    quotas: dict[str, dict[str, float]] = {}
    for q in catalog.quotas:
        if q.region == region:
            quotas.setdefault(q.quota_group, {})[q.market.value] = q.vcpus
    if not quotas:
        return "vCPU quotas: unknown (no limit applied)"
    # a group of one market only (P5 spot: on-demand P5 count against P) is said with its market
    parts = [
        f"{group} {_vcpus(by.get('on-demand'))}/{_vcpus(by.get('spot'))}"
        if len(by) == 2
        else f"{group} {' '.join(f'{market} {_vcpus(v)}' for market, v in by.items())}"
        for group, by in sorted(quotas.items())
    ]
    return "vCPU quotas on-demand/spot: " + ", ".join(parts)


def _vcpus(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def _table(title: str, caption: str, headers: tuple[str, ...], left: int) -> Table:
    table = Table(
        title=title,
        caption=caption,
        title_justify="left",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=0,
    )
    for index, header in enumerate(headers):
        table.add_column(header, justify="left" if index < left else "right", no_wrap=True)
    return table


def _render(catalog: Catalog, rows: list[MarketRow], holders: bool) -> None:
    """One table per region (GPU types by descending spot FLOPP), then holders when asked for."""
    source = _source_line(catalog)
    wide = console.out.width >= WIDE_COLUMNS
    headers = GPU_HEADERS if wide else tuple(h for h in GPU_HEADERS if h not in GPU_WIDE_ONLY)
    for region in sorted({r.region for r in rows}):
        in_region = [r for r in rows if r.region == region]
        gpu_table = _table(f"GPU instance types in {region} — {source}", _quota_line(catalog, region), headers, left=2)
        for r in in_region:
            t = r.instance_type
            if t.is_gpu:
                zone, spot = r.cheapest_spot or ("-", None)
                cells = {
                    "type": t.name,
                    "GPUs": f"{t.gpu_count}x {t.gpu_model or '?'}",
                    "vCPU": str(t.vcpus),
                    "GiB": _gib(t),
                    "Gbps": f"{t.network_gbps:g}",
                    "TFLOPS": f"{t.flops:g}",
                    "od $/h": _money(r.on_demand_usd),
                    "spot $/h": _money(spot),
                    "zone": zone.removeprefix(region),
                    "FLOPP sp": _short(r.flopp_spot),
                    "FLOPP od": _short(r.flopp_on_demand),
                }
                gpu_table.add_row(*(cells[h] for h in headers))
        console.out.print(gpu_table)
        cpu_rows = [r for r in in_region if not r.instance_type.is_gpu]
        if holders and cpu_rows:
            cpu_table = _table(f"CPU checkpoint holders in {region}", "", HOLDER_HEADERS, left=1)
            for r in cpu_rows:
                t = r.instance_type
                zone, spot = r.cheapest_spot or ("-", None)
                cpu_table.add_row(
                    t.name,
                    str(t.vcpus),
                    _gib(t),
                    f"{t.network_gbps:g}",
                    _money(r.on_demand_usd),
                    _money(spot),
                    zone.removeprefix(region),
                )
            console.out.print(cpu_table)
    if not wide and any(r.instance_type.is_gpu for r in rows):  # on stderr: what is missing is no data
        console.info(
            f"{' and '.join(GPU_WIDE_ONLY)} left out at {console.out.width} columns: {WIDE_COLUMNS} show "
            "them, and --json has every field"
        )


def _gib(t: InstanceType) -> str:
    return "-" if t.memory_gib is None else f"{t.memory_gib:g}"


GPU_HEADERS = ("type", "GPUs", "vCPU", "GiB", "Gbps", "TFLOPS", "od $/h", "spot $/h", "zone", "FLOPP sp", "FLOPP od")
# Below this terminal width the network and on-demand FLOPP columns are left out (`--json` has them), so
# that no price, type name or number is cut at 80 columns.
WIDE_COLUMNS = 110
GPU_WIDE_ONLY = ("Gbps", "FLOPP od")
HOLDER_HEADERS = ("type", "vCPU", "GiB", "Gbps", "od $/h", "spot $/h", "zone")


def register(app: typer.Typer) -> None:
    app.command("market", help=HELP)(market)
    app.command("catalog", help=HELP, hidden=True)(market)
