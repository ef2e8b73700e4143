"""`deepvm config show|set|unset`: the defaults file (deepvm_cli/ui/user_config.py) without an editor, and
which cluster a command takes when none is named (deepvm_cli/ui/cluster_choice.py)."""

from __future__ import annotations

import typer

from deepvm_cli.ui import console
from deepvm_cli.ui.user_config import KEYS, UserConfig

config_app = typer.Typer(
    help=f"Defaults for flags ({', '.join(KEYS)}) in $DEEPVM_HOME/config.yaml.", no_args_is_help=True
)
_KEY_HELP = f"One of {', '.join(KEYS)}."


@config_app.command("show")
def config_show(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show the file's defaults and the cluster a command takes when none is named."""
    from deepvm_cli.ui.cluster_choice import choose_cluster
    from deepvm_cli.ui.user_config import Defaults

    defaults = Defaults()
    config = defaults.config
    choice = choose_cluster(None, defaults)
    if as_json:
        console.print_json(
            {
                "file": str(config.path),
                "defaults": config.shown(),
                "cluster": {"name": choice.name, "source": choice.source.value},
            }
        )
        return
    _show(config)
    console.info(f"a command given no cluster takes {choice.name} ({choice.origin()})")


@config_app.command("set")
def config_set(
    key: str = typer.Argument(..., help=_KEY_HELP), value: str = typer.Argument(..., help="The value.")
) -> None:
    """Set one default (checked as the file is: a bad value is refused and nothing is written)."""
    from deepvm_cli.ui.user_config import set_value

    _show(set_value(key, value))


@config_app.command("unset")
def config_unset(key: str = typer.Argument(..., help=_KEY_HELP)) -> None:
    """Remove one default: the command's own applies again."""
    from deepvm_cli.ui.user_config import unset_value

    _show(unset_value(key))


def _show(config: UserConfig) -> None:
    values = config.shown()
    for key, value in values.items():
        console.out.print(f"{key}: {value:g}" if isinstance(value, float) else f"{key}: {value}", markup=False)
    console.info(f"{config.path}" + ("" if values else " sets no defaults"))


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
