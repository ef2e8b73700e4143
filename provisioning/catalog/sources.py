"""Which catalog a command works on: a given file, the built-in snapshot, or live AWS with a fallback.

`resolve_catalog` is the one entry point for `deepvm plan` and `deepvm market`. Live AWS is the default;
when it cannot be used (no credentials, no network, credentials refused) the snapshot stands in and
`catalog.warnings` says why, so the user always gets an answer and always knows what it rests on.
The offline path never imports boto3, to keep `--offline` answers well under a second.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from provisioning.catalog.files import load_catalog_file
from provisioning.catalog.model import Catalog
from provisioning.catalog.snapshot import load_snapshot, save_snapshot, snapshot_age, snapshot_label
from provisioning.core.errors import CloudError, InputError

ALL_REGIONS = "all"
FALLBACK_REGION = "us-east-1"


def resolve_catalog(
    *, regions: list[str] | None, offline: bool, catalog_file: Path | None, refresh: bool = False
) -> Catalog:
    """The catalog to plan on, limited to `regions`.

    regions: None = the default region (AWS config / AWS_DEFAULT_REGION, else us-east-1; for a catalog
    file, every region in it), ["all"] = every region the source has, else these names.
    catalog_file: use that file alone and call no AWS API. offline: use the built-in snapshot.
    refresh: ignore cached live data.
    """
    if catalog_file is not None:
        catalog = load_catalog_file(catalog_file)
        return restrict(catalog, regions, default_region=None, label=str(catalog_file))
    if offline:
        snapshot = load_snapshot()
        return restrict(snapshot, regions, default_region=_default_region(regions), label=snapshot_label(snapshot))
    return _live_or_snapshot(regions, refresh)


def _live_or_snapshot(regions: list[str] | None, refresh: bool) -> Catalog:
    from provisioning.catalog.market.aws import AwsUnavailable

    try:
        return _live(regions, refresh)
    except AwsUnavailable as exc:
        snapshot = load_snapshot()
        label = snapshot_label(snapshot)
        fallback = restrict(snapshot, regions, default_region=_default_region(regions), label=label, why=exc.reason)
        fallback.warnings.append(f"{exc.reason}; using {label} ({snapshot_age(snapshot.as_of)}){_fix(exc.reason)}")
        return fallback


def _fix(reason: str) -> str:
    """How to get live prices instead, when the reason is the user's to fix (their credentials or rights)."""
    from provisioning.catalog.market.aws import MISSING_RIGHT, NO_CREDENTIALS, REFUSED_CREDENTIALS

    if reason.startswith((NO_CREDENTIALS, REFUSED_CREDENTIALS)):
        return "; for live prices set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (as for the AWS CLI)"
    if reason.startswith(MISSING_RIGHT):
        return (
            "; for live prices add that right to your identity's IAM policy (README: \"What deepvm needs "
            'from your AWS account")'
        )
    return ""


def _live(regions: list[str] | None, refresh: bool) -> Catalog:
    """The live catalog; raises AwsUnavailable when AWS cannot be used."""
    from provisioning.catalog.market.live import LiveMarket

    market = LiveMarket(refresh=refresh)
    wanted = _requested(regions, market.regions(), market.default_region(), label="AWS")
    return market.catalog(wanted)


def save_live_snapshot(path: Path, *, regions: list[str] | None, refresh: bool = False) -> Catalog:
    """Write the live catalog of `regions` to `path` in the snapshot's form, to refresh the built-in one."""
    from provisioning.catalog.market.aws import AwsUnavailable

    try:
        catalog = _live(regions, refresh)
    except AwsUnavailable as exc:
        raise CloudError(f"cannot save a snapshot without live AWS data: {exc.reason}") from None
    notes = [
        f"Saved from live AWS at {catalog.as_of} by `deepvm market --save-snapshot` "
        f"(regions: {', '.join(catalog.regions)}).",
        "Spot prices: the price per availability zone at that time. Quotas: that account's vCPU quotas.",
        "flops: dense FP16/BF16 tensor TFLOPS per GPU (provisioning/catalog/data/gpus.json) x GPU count.",
    ]
    try:
        save_snapshot(catalog, path, notes)
    except OSError as exc:
        raise InputError(f"cannot write snapshot {path}: {exc.strerror}") from None
    return catalog


def restrict(
    catalog: Catalog, regions: list[str] | None, *, default_region: str | None, label: str, why: str | None = None
) -> Catalog:
    """`catalog` limited to the requested regions, or an InputError naming the regions it does have.

    `why` explains (in the error) why this catalog is being used, e.g. when the snapshot stands in.
    """
    try:
        return catalog.restricted_to(_requested(regions, catalog.regions, default_region, label))
    except InputError as exc:
        raise InputError(f"{why}, and {exc}" if why else str(exc)) from None


def _requested(regions: list[str] | None, available: list[str], default_region: str | None, label: str) -> list[str]:
    if regions is None:
        if default_region is None:
            return list(available)
        if default_region not in available:
            raise InputError(
                f"{label} has no prices for your default region {default_region}; "
                f"choose one of {', '.join(available)} with --region"
            )
        return [default_region]
    if ALL_REGIONS in regions:
        return list(available)
    for region in regions:
        if region not in available:
            close = difflib.get_close_matches(region, available, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise InputError(f"unknown region {region!r}{hint}; {label} has {', '.join(available)}")
    return list(dict.fromkeys(regions))


def _default_region(regions: list[str] | None) -> str | None:
    """The configured region, looked up only when no region was asked for (it may import botocore)."""
    return configured_region() if regions is None else None


def configured_region() -> str:
    """The default AWS region the way the AWS CLI finds it, else us-east-1.

    The environment is read first so that the common case needs no botocore import.
    """
    region = os.environ.get("AWS_DEFAULT_REGION")
    if region:
        return region
    import botocore.session
    from botocore.exceptions import BotoCoreError

    try:
        return botocore.session.get_session().get_config_variable("region") or FALLBACK_REGION
    except BotoCoreError:
        return FALLBACK_REGION
