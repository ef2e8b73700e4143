"""Which cluster a command works on when the user names none, as `sky` remembers its last cluster.

The order is: the flag (or argument), the config file's `cluster:` (deepvm_cli/ui/user_config.py), the last
cluster used, then `deepvm`. "Used" means launched by `up`, or chosen for a command that found it (train,
profile, chaos, status, jobs; named by the user or taken from the config file), so a typo never becomes
the default; `down` forgets it. `up` alone skips the last cluster used: it names a new cluster.

A command says which cluster it chose whenever the user did not name it, and an error about a cluster
that is not there says where its name came from, so a default is never silent. `down` goes further: it
names the cluster in its question, and with --yes it needs the name (deepvm_cli/commands/down.py).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from deepvm_cli.ui import console
from deepvm_cli.ui.user_config import Defaults, load_config
from provisioning.cloud.names import DEFAULT_CLUSTER_NAME, check_cluster_name
from provisioning.core.errors import InputError
from provisioning.core.home import deepvm_home, home_path

if TYPE_CHECKING:
    from provisioning.clusters.handle import Cluster

LAST_CLUSTER_FILE = "last_cluster"


class Source(Enum):
    GIVEN = "given"
    CONFIG = "config"
    LAST = "last"
    DEFAULT = "default"


@dataclass(frozen=True)
class ClusterChoice:
    """The cluster a command works on, and why that one."""

    name: str
    source: Source
    config_file: Path | None = None  # with Source.CONFIG

    def origin(self, flag: str = "") -> str:
        """Why this cluster, for a note or an error ("" when the user named it); `flag`, if given, is how to
        name another."""
        why = {
            Source.GIVEN: "",
            Source.CONFIG: f"from {self.config_file}",
            Source.LAST: "the last one used",
            Source.DEFAULT: "the default name",
        }[self.source]
        return f"{why}; {flag} picks another" if why and flag else why

    def announce(self, flag: str) -> None:
        """One line naming the cluster when the user did not."""
        if self.source is not Source.GIVEN:
            console.info(f"cluster {self.name} ({self.origin(flag)})")


def choose_cluster(given: str | None, defaults: Defaults | None = None, last: bool = True) -> ClusterChoice:
    """The cluster for a command whose flag or argument holds `given` (None: not given); `defaults` is the
    command's config file reader when it has one. `last=False` for `up`: a new cluster is not named after
    the last one used (a second `up` would find that one up and launch nothing)."""
    if given is not None:
        return ClusterChoice(check_cluster_name(given), Source.GIVEN)
    config = defaults.config if defaults is not None else load_config()
    if config.cluster is not None:
        return ClusterChoice(config.cluster, Source.CONFIG, config.path)
    remembered = last_cluster() if last else None
    if remembered is not None:
        return ClusterChoice(remembered, Source.LAST)
    return ClusterChoice(DEFAULT_CLUSTER_NAME, Source.DEFAULT)


def open_chosen(choice: ClusterChoice, flag: str, running: bool) -> Cluster:
    """The chosen cluster (`running`: only if it is up), remembered as the last one used and announced; a
    NotFoundError that lists the clusters there are, and says where the name came from, otherwise."""
    from provisioning.clusters.handle import Cluster

    why = choice.origin(flag)
    cluster = Cluster.open_running(choice.name, why) if running else Cluster.open(choice.name, why=why)
    remember_cluster(choice.name)
    choice.announce(flag)
    return cluster


def last_cluster() -> str | None:
    """The cluster last used, or None (never recorded, or a file that does not hold a cluster name)."""
    path = home_path() / LAST_CLUSTER_FILE
    try:
        name = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
        return check_cluster_name(name) if name else None
    except (OSError, UnicodeDecodeError, InputError):
        return None  # a memory for convenience: a damaged one is no memory, not an error


def remember_cluster(name: str) -> None:
    """Record `name` as the last cluster used (best effort: a command never fails for it)."""
    if last_cluster() == name:
        return
    from provisioning.core.atomicfile import write_text_atomic

    with contextlib.suppress(OSError, InputError):
        write_text_atomic(deepvm_home() / LAST_CLUSTER_FILE, name + "\n")


def forget_cluster(name: str) -> None:
    """After `down NAME`: NAME is no longer a cluster to default to."""
    if last_cluster() == name:
        with contextlib.suppress(OSError):  # best effort, as remember_cluster: the cluster is gone already
            (home_path() / LAST_CLUSTER_FILE).unlink(missing_ok=True)
