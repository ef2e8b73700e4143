"""`deepvm sandbox status|stop|realism`: see and stop the sandbox's control plane and hosts, and set how far
its EC2 behaves like AWS (provisioning/sandbox/realism.py)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from deepvm_cli.ui import console

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
    console.out.print(
        f"supervisor: {'running' if supervisor['running'] else 'stopped'} (pid {supervisor['pid']})"
    )
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


def register(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")
