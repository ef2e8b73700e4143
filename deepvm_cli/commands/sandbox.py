"""`deepvm sandbox status|stop|realism|capacity`: see and stop the sandbox's control plane and hosts, set how
far its EC2 behaves like AWS (provisioning/sandbox/realism.py), and what capacity its pools have."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from deepvm_cli.ui import console
from deepvm_cli.ui.flags import DAY_S, at_least

_MOST_INSTANCES = 100_000  # `sandbox capacity --available`: more than any pool of a sandbox could launch
_WEEK_S = 7 * DAY_S  # the longest a capacity rule holds (`--for`)

sandbox_app = typer.Typer(help="The local sandbox cloud (moto EC2 + namespaced hosts).", no_args_is_help=True)


@sandbox_app.command("status")
def sandbox_status(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show the moto server, the supervisor and every host with its address and processes."""
    from provisioning.sandbox.control import BANNER, sandbox_report

    report = sandbox_report()
    if as_json:
        console.print_json(report)
        return
    console.info(BANNER)
    moto, supervisor = report["moto"], report["supervisor"]
    console.out.print(
        f"moto server: {'running' if moto['running'] else 'stopped'} (pid {moto['pid']}, {moto['endpoint']})"
    )
    console.out.print(f"supervisor: {'running' if supervisor['running'] else 'stopped'} (pid {supervisor['pid']})")
    for host in report["hosts"]:
        console.out.print(
            f"host {host['instance_id']}: {host['address']} pids {host['pids'] or '-'}"
            f" {'running' if host['pids'] else 'dead'}"
        )
    if not report["hosts"]:
        console.out.print("no hosts")


@sandbox_app.command("stop")
def sandbox_stop() -> None:
    """Stop every host, the supervisor and the moto server (sandbox clusters are gone afterwards)."""
    from provisioning.sandbox.control import stop_sandbox

    stopped = stop_sandbox()
    for item in stopped:
        console.out.print(f"stopped {item}")
    console.info("sandbox stopped" if stopped else "the sandbox was not running")


@sandbox_app.command("realism")
def sandbox_realism(
    settings: Path | None = typer.Option(None, "--set", help="A JSON file of realism settings to put in force."),
    reset: bool = typer.Option(False, "--reset", help="Put the sandbox's own settings back in force."),
) -> None:
    """Show (as JSON) or change how the running sandbox's EC2 behaves like AWS: listing lags, eventual
    consistency, instant fleets, a capacity schedule (provisioning/sandbox/realism.py says each)."""
    from provisioning.core.errors import CloudError, InputError
    from provisioning.core.inputfile import MIB, read_user_file
    from provisioning.sandbox.control import running_sandbox
    from provisioning.sandbox.realism import SANDBOX, Realism, RealismControl

    if settings is not None and reset:
        raise InputError("--set and --reset are alternatives: give one")
    info = running_sandbox()
    if info is None:
        raise CloudError("the sandbox is not running (`deepvm up --cloud sandbox` starts it)")
    control = RealismControl(info.endpoint)
    if settings is not None:
        try:
            control.set(Realism.from_json(read_user_file(settings, "realism settings file", MIB)))
        except ValueError as exc:
            raise InputError(f"{settings}: {exc}") from None
    elif reset:
        control.set(SANDBOX)
    console.print_json(json.loads(control.settings().to_json()))


@sandbox_app.command("capacity")
def sandbox_capacity(
    zone: str = typer.Option("*", "--zone", help="The pool's Availability Zone ('*': every zone)."),
    instance_type: str = typer.Option("*", "--type", help="The pool's instance type ('*': every type)."),
    market: str = typer.Option("*", "--market", help="spot, on-demand or '*' (both)."),
    available: int | None = typer.Option(
        None,
        "--available",
        callback=at_least(0, _MOST_INSTANCES),
        help="Instances the pool launches from now on; CreateFleet gets what is left and Errors[] for the rest.",
    ),
    for_s: float | None = typer.Option(
        None, "--for", callback=at_least(1, _WEEK_S), help="Seconds the rule holds (default: until --clear)."
    ),
    code: str = typer.Option("InsufficientInstanceCapacity", "--code", help="The error code EC2 answers with."),
    clear: bool = typer.Option(False, "--clear", help="Every pool has capacity without end again."),
) -> None:
    """Show (as JSON) or set the running sandbox's capacity schedule: `--available 0` empties a pool, as
    AWS's are when Spot runs out; the newest rule decides for the pools it matches."""
    import time
    from dataclasses import asdict, replace

    from provisioning.core.errors import CloudError, InputError
    from provisioning.sandbox.control import running_sandbox
    from provisioning.sandbox.realism import CAPACITY_CODES, CapacityRule, RealismControl

    if clear and available is not None:
        raise InputError("--clear and --available are alternatives: give one")
    if available is None and (for_s is not None or (zone, instance_type, market) != ("*", "*", "*")):
        raise InputError("--available N says what the pool may launch: give it with --zone, --type, --market, --for")
    if code not in CAPACITY_CODES:
        raise InputError(f"--code must be one of {', '.join(CAPACITY_CODES)}, not {code!r}")
    ends_at = None if for_s is None else time.time() + for_s
    rule = CapacityRule(zone, instance_type, market, available or 0, code, ends_at=ends_at)
    if available is not None and (problem := rule.problem()) is not None:
        raise InputError(f"--{problem}")
    info = running_sandbox()
    if info is None:
        raise CloudError("the sandbox is not running (`deepvm up --cloud sandbox` starts it)")
    control = RealismControl(info.endpoint)
    if clear or available is not None:
        settings = control.settings()
        control.set(replace(settings, capacity=() if clear else (rule, *settings.capacity)))
    console.print_json([asdict(r) for r in control.settings().capacity])


def register(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")
