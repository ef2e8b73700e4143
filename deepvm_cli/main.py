"""The `deepvm` command: one typer app; each command lives in its own module and calls one function."""

from __future__ import annotations

import os
import sys

import click
import typer

from deepvm_cli import console
from provisioning.errors import DeepvmError

app = typer.Typer(
    name="deepvm",
    help="Plan, provision and train on cost-efficient Spot + On-Demand GPU clusters.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals may hold credentials
    add_completion=False,
)


def _register_commands() -> None:
    from deepvm_cli import down_cmd, interrupt_cmd, sandbox_cmd, status_cmd, up_cmd

    for module in (up_cmd, status_cmd, down_cmd, interrupt_cmd, sandbox_cmd):
        module.register(app)


def run() -> None:
    """Console-script entry: every error becomes one line on stderr and a distinct exit code."""
    _register_commands()
    debug = bool(os.environ.get("DEEPVM_DEBUG"))
    try:
        app(standalone_mode=False)
    except DeepvmError as exc:
        if debug:
            raise
        console.error_line(str(exc))
        sys.exit(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError:
        sys.exit(0)
    except click.ClickException as exc:
        console.error_line(exc.format_message().replace("\n", " "))
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        console.error_line("interrupted")
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:
        if debug:
            raise
        console.error_line(f"internal error: {type(exc).__name__}: {exc} (set DEEPVM_DEBUG=1 for details)")
        sys.exit(1)
