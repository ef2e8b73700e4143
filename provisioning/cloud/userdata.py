"""The cloud-config user-data that makes a fresh instance a deepvm node, and its reader for the sandbox.

On AWS cloud-init installs `ssh_keys` as the host keys (so they are pinned, not learnt) and authorises the
login key for the image's default user. The sandbox's host rig reads the same document, so both clouds
boot a node from the same instructions.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import yaml


@dataclass(frozen=True)
class NodeBoot:
    """What a node needs at boot: the host key pair it presents and the login keys it accepts."""

    host_key_private: str
    host_key_public: str
    authorized_keys: tuple[str, ...]


def render_user_data(boot: NodeBoot) -> str:
    """Base64 cloud-config, ready for a launch template."""
    doc = {
        "ssh_deletekeys": True,
        "ssh_genkeytypes": [],
        "ssh_keys": {"ed25519_private": boot.host_key_private, "ed25519_public": boot.host_key_public},
        "ssh_authorized_keys": list(boot.authorized_keys),
    }
    text = "#cloud-config\n" + yaml.safe_dump(doc, sort_keys=False)
    return base64.b64encode(text.encode()).decode()


def parse_user_data(encoded: str) -> NodeBoot:
    """The inverse of render_user_data; raises ValueError for anything else."""
    text = base64.b64decode(encoded).decode()
    if not text.startswith("#cloud-config"):
        raise ValueError("user-data is not a cloud-config document")
    doc = yaml.safe_load(text)
    keys = doc.get("ssh_keys") or {}
    if "ed25519_private" not in keys:
        raise ValueError("user-data has no ed25519 host key")
    return NodeBoot(
        host_key_private=keys["ed25519_private"],
        host_key_public=keys["ed25519_public"],
        authorized_keys=tuple(doc.get("ssh_authorized_keys") or ()),
    )
