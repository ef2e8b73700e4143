"""The user's defaults for flags: `$DEEPVM_HOME/config.yaml` (default ~/.deepvm/config.yaml), as AWS CLI
users keep theirs in ~/.aws/config and SkyPilot users in ~/.sky/config.yaml.

    region: us-west-2   # plan, market, simulate and `up --max-price` (not a --catalog file's regions)
    cloud: aws          # up, and down's sweep: auto | aws | sandbox
    max_price: 12       # plan and simulate (without --plan): USD per hour
    cluster: ux         # every command that takes a cluster (deepvm_cli/ui/cluster_choice.py)
    down_when_done: true  # managed `train`: the job's end takes its cluster down (--down-when-done)
    notify_secret: ...  # what `train --notify URL` signs its posts with (never shown by `config show`)

A flag always wins over the file. The file decides what is bought and where, so it is read as strictly as
a plan file: within provisioning/core/inputfile.py's limits, every key known and every value of its type and
range (deepvm_cli/ui/config_document.py); any problem is one InputError line naming the file and the key,
never a silent fallback to a default. No file means no defaults. The file is only read when it exists,
and pydantic and PyYAML load only then, so a command without one starts as fast as before.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from deepvm_cli.ui import console
from provisioning.core.errors import InputError
from provisioning.core.home import config_path
from provisioning.core.inputfile import KIB

MAX_CONFIG_BYTES = 64 * KIB


@dataclass(frozen=True)
class UserConfig:
    """The defaults the file sets (None: not set), and the file they came from."""

    path: Path
    region: str | None = None
    cloud: str | None = None
    max_price: float | None = None
    cluster: str | None = None
    down_when_done: bool | None = None
    notify_secret: str | None = None

    def values(self) -> dict[str, str | float | bool]:
        """The keys that are set, in the file's key order."""
        return {k: v for k in KEYS if (v := getattr(self, k)) is not None}

    def shown(self) -> dict[str, str | float | bool]:
        """The keys that are set, as `config show` prints them: a secret only as set, never its value."""
        return {k: "(set)" if k in SECRET_KEYS else v for k, v in self.values().items()}


KEYS = tuple(f.name for f in fields(UserConfig) if f.name != "path")
SECRET_KEYS = ("notify_secret",)
T = TypeVar("T")


class Defaults:
    """The config file's values, handed to a command for each flag it was not given; it then says which
    values came from the file, so that a default is never a surprise."""

    def __init__(self, tolerant: bool = False) -> None:
        self._config: UserConfig | None = None
        self._used: list[str] = []
        self._tolerant = tolerant  # a broken file is a warning, not an error (for `down`)

    @property
    def config(self) -> UserConfig:
        """The file, read the first time a value is needed: a command given every value never reads it, so
        a broken file cannot stop, say, `down NAME --yes` while the cluster bills."""
        if self._config is None:
            try:
                self._config = load_config()
            except InputError as exc:
                if not self._tolerant:
                    raise
                console.warning(f"{exc}; the config file is ignored")
                self._config = UserConfig(config_path())
        return self._config

    def fill(self, given: T | None, key: str) -> T | None:
        """`given` (the flag's value), else the file's `key` (None when the file does not set it)."""
        if given is not None:
            return given
        value = getattr(self.config, key)
        if value is not None and key not in self._used:
            self._used.append(key)
        return value

    def announce(self) -> None:
        """One line naming the values taken from the file, if any."""
        if self._used:
            taken = ", ".join(
                f"{key} {getattr(self.config, key):g}" if key == "max_price" else f"{key} {getattr(self.config, key)}"
                for key in self._used
            )
            console.info(f"{taken} (from {self.config.path})")


def load_config() -> UserConfig:
    """The defaults in the config file; none when there is no file."""
    path = config_path()
    if not path.exists() and not path.is_symlink():  # a dangling link is read, and refused in one line
        return UserConfig(path)
    return _read(path)


def _read(path: Path) -> UserConfig:
    from training.shared.yamlmarks import read_yaml

    doc = read_yaml(path, "config file", MAX_CONFIG_BYTES)
    if doc.duplicate_keys:
        twice = doc.duplicate_keys[0]
        raise InputError(f"{path}:{twice.line}: {twice.names[-1]}: given twice (first at line {twice.first_line})")
    return _checked(path, {} if doc.data is None else doc.data)


def _raw(path: Path) -> dict[Any, Any] | InputError:
    """The file's mapping as written, unchecked, for `config set` and `unset` to repair: a wrong key or value
    is theirs to fix, so it must not stop them (the result is checked whole before it is written). A file
    that cannot be read as a mapping at all (invalid YAML, not UTF-8, a FIFO, a directory, a list) holds
    nothing to keep: the error says why, and the caller moves the file aside (`_move_aside`)."""
    from training.shared.yamlmarks import read_yaml

    if not path.exists() and not path.is_symlink():
        return {}
    try:
        data = read_yaml(path, "config file", MAX_CONFIG_BYTES).data
    except InputError as exc:
        return exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        return InputError(f"{path}: must be a mapping of keys ({', '.join(KEYS)}), not a {type(data).__name__}")
    return data


def _checked(path: Path, data: Any) -> UserConfig:
    """`data` (the parsed file, or what `deepvm config set` would write) as defaults, or one InputError."""
    from deepvm_cli.ui.config_document import check_document
    from provisioning.core.strictdoc import DocumentError

    if not isinstance(data, dict):
        raise InputError(f"{path}: must be a mapping of keys ({', '.join(KEYS)}), not a {type(data).__name__}")
    for key in data:
        if key not in KEYS:
            raise _unknown_key(key, f"{path}: ")
    try:
        document = check_document(data)
    except DocumentError as exc:
        raise InputError(f"{path}: {exc}") from None
    return UserConfig(path, **document.model_dump())


def _unknown_key(key: object, where: str = "") -> InputError:
    close = difflib.get_close_matches(str(key), KEYS, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return InputError(f"{where}{key}: unknown key{hint}; the keys are {', '.join(KEYS)}")


def set_value(key: str, text: str) -> UserConfig:
    """Write `key: text` into the file (created if need be), after checking the whole result; the file is
    rewritten in deepvm's order, without comments. An unreadable file is kept as a backup (`_move_aside`)."""
    path = config_path()
    written = _raw(path)
    if key not in KEYS:
        raise _unknown_key(key)
    value: str | float | bool = text
    if key == "max_price":
        try:
            value = float(text)
        except ValueError:
            raise InputError(f"max_price must be a number (USD per hour), got {text!r}") from None
    if key == "down_when_done":
        if text.lower() not in ("true", "false"):
            raise InputError(f"{path}: down_when_done: must be true or false, got {text!r}")
        value = text.lower() == "true"
    kept = {} if isinstance(written, InputError) else written
    return _write(path, {**kept, key: value}, written if isinstance(written, InputError) else None)


def unset_value(key: str) -> UserConfig:
    """Remove `key` from the file (nothing to do when it is not set). An unreadable file is kept as a
    backup and replaced by an empty one (`_move_aside`)."""
    path = config_path()
    written = _raw(path)
    if isinstance(written, InputError):
        if key not in KEYS:
            raise _unknown_key(key)
        return _write(path, {}, written)
    if key not in KEYS and key not in written:  # a misspelt key in the file can be removed by its name
        raise _unknown_key(key)
    return _write(path, {k: v for k, v in written.items() if k != key})


def _write(path: Path, values: dict[str, Any], unreadable: InputError | None = None) -> UserConfig:
    import yaml

    from provisioning.core.atomicfile import write_text_atomic
    from provisioning.core.home import deepvm_home

    config = _checked(path, values)  # a bad new value leaves the file as it was, readable or not
    deepvm_home()  # the directory, owner-only, or one line saying why it cannot be
    if unreadable is not None:
        backup = _move_aside(path, unreadable)
        console.warning(f"{unreadable}; kept it as {backup} and wrote a new {path.name}")
    try:
        write_text_atomic(path, yaml.safe_dump(config.values(), sort_keys=False) if values else "")
    except OSError as exc:
        raise InputError(f"cannot write config file {path}: {exc.strerror or exc}") from None
    return config


def _move_aside(path: Path, unreadable: InputError) -> Path:
    """Rename the unreadable file (or FIFO, or directory) to the first free `config.yaml.broken[-N]` beside it,
    so that nothing the user wrote there is lost; its name is what the warning gives. Renaming works on
    every kind of entry and never reads it (a FIFO would block a copy)."""
    for n in range(1, 1000):
        backup = path.with_name(f"{path.name}.broken" + ("" if n == 1 else f"-{n}"))
        if not os.path.lexists(backup):
            try:
                os.rename(path, backup)
            except OSError as exc:
                raise InputError(
                    f"{unreadable}; cannot move it aside ({exc.strerror or exc}): remove it "
                    f"(`rm -r {path}`) and run this again"
                ) from None
            return backup
    raise InputError(f"{unreadable}; {path}.broken-2 to -999 are taken: remove the old backups or the file itself")
