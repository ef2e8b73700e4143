"""`deepvm sandbox status|stop`: see and stop the sandbox's control plane and hosts."""

from __future__ import annotations

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


def register(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")
