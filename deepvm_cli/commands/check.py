"""`deepvm check`: is this AWS account (or the sandbox) ready for `plan`, `up` and managed jobs?

Credentials and identity, the region, each IAM right deepvm calls with your credentials (IAM's policy
simulator where you may call it, EC2's DryRun otherwise; a right nothing could probe is ?, never ✓), the vCPU
quotas against the saved plan and the image, as ✓/✗/? rows with a one-line fix for each ✗.

Exit codes: 0 nothing is ✗; 1 something is ✗; 2 bad input; 3 with --strict, nothing is ✗ but something
is ?; 4 the cloud could not be reached at all (the sandbox could not start).
"""

from __future__ import annotations

from pathlib import Path

import typer

from deepvm_cli.ui import console
from deepvm_cli.ui.flags import region_list
from deepvm_cli.ui.user_config import Defaults


def check_command(
    cloud: str | None = typer.Option(
        None, "--cloud", help="auto | aws | sandbox (auto, the default: sandbox without AWS keys)."
    ),
    region: str | None = typer.Option(
        None, "--region", callback=region_list, help="Region (default: the plan's, else the configured one)."
    ),
    plan: Path | None = typer.Option(
        None, "--plan", help="Plan file to hold the quotas against (default: the plan `deepvm plan` saved)."
    ),
    ami: str | None = typer.Option(None, "--ami", help="The AMI `up --ami` would boot (default: the DLAMI)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
    strict: bool = typer.Option(False, "--strict", help="Fail (exit 3) on anything that cannot be told (a ? row)."),
) -> int:
    """Check credentials, region, IAM rights, quotas and the image before `plan` and `up`.

    Exit codes: 0 ready, 1 a ✗ row, 2 bad input, 3 a ? row with --strict, 4 no cloud to check.
    """
    from provisioning.account.check import CheckRequest, run_check

    defaults = Defaults()
    # the config file's region is the fallback after the plan's (as for `up`, a plan carries its region)
    request = CheckRequest(
        cloud=defaults.fill(cloud, "cloud") or "auto",
        region=region,
        plan_path=plan,
        image_id=ami,
        configured_region=defaults.config.region,
    )
    defaults.announce()
    with console.stages("checking"):
        report = run_check(request)
    if as_json:
        console.print_json(report.to_dict())
    else:
        from deepvm_cli.render.check import render_check

        render_check(report, strict)
    return report.exit_code(strict)


def register(app: typer.Typer) -> None:
    app.command("check")(check_command)
