"""The config file's document model: what each key may hold, checked as strictly as a plan file.

Kept apart from deepvm_cli/ui/user_config.py because it imports pydantic (provisioning/core/strictdoc.py), which
only a command that finds a config file, or `deepvm config`, should pay for.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, StrictBool
from pydantic_core import PydanticCustomError

from deepvm_cli.ui.flags import MAX_PRICE
from provisioning.cloud.names import check_cluster_name
from provisioning.core.errors import InputError
from provisioning.core.strictdoc import Name, Strict, show, validate

CLOUDS = ("auto", "aws", "sandbox")


def _price(value: Any) -> float:
    """USD per hour, by --max-price's rule: a finite number above 0 and at most MAX_PRICE."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_PRICE
    if not ok:
        raise PydanticCustomError(
            "price",
            f"must be a number above 0 and at most {MAX_PRICE:,.0f} (USD per hour), got {{got}}",
            {"got": show(value)},
        )
    return float(value)


def _secret(value: Any) -> str:
    """A secret to sign with: printable, 16 to 256 characters (a shorter one is guessed)."""
    if not isinstance(value, str) or not 16 <= len(value) <= 256 or not value.isprintable():
        raise PydanticCustomError("secret", "must be a string of 16 to 256 printable characters", {})
    return value


def _cluster(value: Any) -> str:
    if not isinstance(value, str):
        raise PydanticCustomError("cluster", "must be a cluster name, got {got}", {"got": show(value)})
    try:
        return check_cluster_name(value)
    except InputError as exc:
        raise PydanticCustomError("cluster", "{problem}", {"problem": str(exc)}) from None


class ConfigDocument(Strict):
    """`$DEEPVM_HOME/config.yaml`; an absent key (or `null`) leaves the command's own default."""

    region: Name | None = None
    cloud: Literal["auto", "aws", "sandbox"] | None = None
    max_price: Annotated[float, BeforeValidator(_price)] | None = None
    cluster: Annotated[str, BeforeValidator(_cluster)] | None = None
    down_when_done: StrictBool | None = None
    notify_secret: Annotated[str, BeforeValidator(_secret)] | None = None


def check_document(data: Any) -> ConfigDocument:
    """`data` as the config document; DocumentError (provisioning/core/strictdoc.py) naming the key otherwise."""
    return validate(ConfigDocument, data)
