"""The `deepvm` command: one typer app; each command lives in its own module and calls one function."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

import typer
from typer.exceptions import Abort, Exit, TyperException

from deepvm_cli.ui import console
from provisioning.core.errors import DeepvmError, StoppedByUser

app = typer.Typer(
    name="deepvm",
    help="Plan, provision and train on cost-efficient Spot + On-Demand GPU clusters.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals may hold credentials
)


def _flags_without_type() -> None:
    """typer 0.29 prints `<bool>` after every flag in help (`--help` included), which reads as a value the
    user must type; a flag takes none, so its type column stays empty."""
    from typer.core import TyperOption

    show_type = TyperOption.display_type_rich
    TyperOption.display_type_rich = lambda option, ctx: None if option.is_flag else show_type(option, ctx)


_flags_without_type()


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("deepvm")
        except PackageNotFoundError:  # run from a checkout that was never installed
            number = "unknown (not installed)"
        typer.echo(f"deepvm {number}")
        raise Exit(0)


@app.callback()
def _root(
    _version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print deepvm's version and exit."
    ),
) -> None:
    """Plan, provision and train on cost-efficient Spot + On-Demand GPU clusters."""


def _register_commands() -> None:
    """Add every command to the app, once (tests run `main` many times in one process)."""
    if app.registered_commands:
        return
    from deepvm_cli.commands import (
        chaos,
        check,
        config,
        cost,
        down,
        interrupt,
        jobs,
        market,
        plan,
        profile,
        sandbox,
        simulate,
        status,
        train,
        up,
        watch,
    )

    for module in (
        check,
        plan,
        market,
        up,
        train,
        profile,
        jobs,
        watch,
        status,
        down,
        cost,
        interrupt,
        sandbox,
        simulate,
        chaos,
        config,
    ):
        module.register(app)


@functools.cache
def _command() -> Callable[..., object]:
    """The click command tree of `app`, built once per process. typer's own `app(...)` builds it anew on every
    call, reading every command's signature again (40-50 ms): what each line run in one process (the tests'
    main_in_process) paid, half the CPU of a line that ends in a usage error."""
    _register_commands()
    return typer.main.get_command(app)


def run() -> None:
    """Console-script entry."""
    sys.exit(main(sys.argv[1:]))


def main(args: list[str]) -> int:
    """Run one command line; every error becomes one line on stderr (or one per mistake it lists) and a
    distinct exit code, which is returned."""
    debug = bool(os.environ.get("DEEPVM_DEBUG"))
    try:
        result = _command()(args=args or ["--help"], standalone_mode=False)
    except StoppedByUser as exc:
        console.plain(f"deepvm: {exc}")
        return exc.exit_code
    except DeepvmError as exc:
        if debug:
            raise
        for line in exc.lines:
            console.error_line(line)
        return exc.exit_code
    except TyperException as exc:  # usage errors: unknown option, bad value, missing argument
        console.error_line(exc.format_message().replace("\n", " "))
        return exc.exit_code
    except (Abort, KeyboardInterrupt):
        console.error_line("interrupted")
        return 130
    except Exit as exc:
        return exc.exit_code
    except Exception as exc:
        if debug:
            raise
        console.error_line(f"internal error: {type(exc).__name__}: {exc} (set DEEPVM_DEBUG=1 for details)")
        return 1
    return result if isinstance(result, int) else 0
