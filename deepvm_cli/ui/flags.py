"""The rules for flag values that every command shares, as typer callbacks.

They run while the command line is parsed, before a command does anything, and each refusal is one
InputError line naming the flag. Click's own ranges (`min=`) let NaN through (every comparison with NaN is
false) and have no notion of a bound that still means something: `--max-price 1e308` or `--after 1e20`
would parse, then overflow deep inside the planner or a timer. So every numeric flag states its range
here, finite at both ends, and `plan`, `up` and the rest answer a bad value with the same sentence.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer

from provisioning.core.errors import InputError

Number = TypeVar("Number", int, float)
Check = Callable[[typer.CallbackParam, Number | None], Number | None]

MAX_PRICE = 1_000_000.0  # USD per hour: a thousand times the dearest instance
DAY_S = 86_400.0
MAX_STEPS = 10**12  # training steps of a simulated or chaos job
MAX_SEED = 2**63 - 1  # random seeds (simulate, chaos)


def positive(at_most: float) -> Check:
    """A finite number above 0 and at most `at_most`."""
    return _range(low=0.0, low_allowed=False, at_most=at_most)


def at_least(low: float, at_most: float) -> Check:
    """A finite number from `low` to `at_most`."""
    return _range(low=low, low_allowed=True, at_most=at_most)


def _range(*, low: float, low_allowed: bool, at_most: float) -> Check:
    def check(param: typer.CallbackParam, value: Number | None) -> Number | None:
        if value is None:
            return value
        flag = _flag(param)
        if math.isnan(value) or math.isinf(value):
            raise InputError(f"{flag} must be a finite number, got {value}")
        if value < low or (value == low and not low_allowed):
            rule = (
                "a positive number"
                if not low_allowed
                else "a non-negative number"
                if low == 0
                else (f"at least {_shown(low)}")
            )
            raise InputError(f"{flag} must be {rule}, got {value:g}")
        if value > at_most:
            raise InputError(f"{flag} must be at most {_shown(at_most)}, got {value:g}")
        return value

    return check


def _shown(bound: float) -> str:
    return f"{int(bound):,}" if bound == int(bound) else f"{bound:g}"


def region_list(param: typer.CallbackParam, value: str | list[str] | None) -> str | list[str] | None:
    """`--region` names at least one region (comma-separated or repeated); `""` is a mistake, not "default"."""
    values = [value] if isinstance(value, str) else value
    if values is not None and not any(name.strip() for v in values for name in v.split(",")):
        raise InputError(f"{_flag(param)} needs a region name, a comma-separated list, or 'all'")
    return value


def _flag(param: typer.CallbackParam) -> str:
    """The flag as the user knows it: its long name."""
    return max(param.opts, key=len) if param.opts else str(param.name)


def writable_folder(flag: str, text: str) -> Path:
    """The folder `text` names, made if need be and shown to be writable, or one InputError naming it.

    Checked before any node is asked for anything: a fetch that fails on the local side after minutes of
    transfer (a file where the folder should be, a read-only place, /proc) is the user's mistake to say
    at once, and `''` is no folder (it would mean the current one without anybody choosing it). Writing
    is proven by creating a file, since permission bits say nothing for root or on special filesystems."""
    if not text.strip():
        raise InputError(f"{flag} needs a folder, got {text!r}")
    folder = Path(text).expanduser()
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{flag} {folder}: is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise InputError(f"{flag} {folder}: cannot write files there: {exc.strerror or exc}") from None
    return folder
