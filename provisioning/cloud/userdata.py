"""The cloud-config user-data that makes a fresh instance a deepvm node, and its reader for the sandbox.

User data holds public keys only: any process on the instance can read it from the metadata service, and
anyone allowed DescribeInstanceAttribute can read it through the API. So the node's SSH host key is not
in it: cloud-init deletes the image's host keys (every instance of an image would share them), generates
a fresh ed25519 key on the node at first boot and prints its public half to the serial console, where
deepvm reads it through the EC2 API and pins it for that instance (provisioning/cloud/pinning.py).
cloud-init also authorises the login and internal keys for the image's default user. The sandbox's host
rig reads the same document, so both clouds boot a node from the same instructions.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import yaml

HOST_KEY_TYPE = "ed25519"


@dataclass(frozen=True)
class NodeBoot:
    """What a node needs at boot: the login keys it accepts (it makes its host key itself)."""

    authorized_keys: tuple[str, ...]


def render_user_data(boot: NodeBoot) -> str:
    """Base64 cloud-config, ready for a launch template."""
    doc = {
        "ssh_deletekeys": True,
        "ssh_genkeytypes": [HOST_KEY_TYPE],
        "ssh": {"emit_keys_to_console": True},
        "ssh_key_console_blacklist": [],
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
    if not isinstance(doc, dict) or HOST_KEY_TYPE not in (doc.get("ssh_genkeytypes") or ()):
        raise ValueError(f"user-data does not ask for an {HOST_KEY_TYPE} host key made on the node")
    return NodeBoot(authorized_keys=tuple(doc.get("ssh_authorized_keys") or ()))
