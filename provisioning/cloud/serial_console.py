"""The block of SSH host keys a node prints to its serial console at first boot, and its reader.

cloud-init prints every host key it generated between these two lines (module keys_to_console), and EC2
hands the console's text to whoever may call GetConsoleOutput on the instance. That is how deepvm learns
a node's key without the key ever being chosen, or seen, anywhere but on the node. The sandbox's hosts
print the same block (provisioning/sandbox/hostinit.py).

A console wraps long lines (at 80 columns on EC2's) and syslog lines around the block carry prefixes, so
the reader takes the key's fixed-length blob across line breaks instead of reading whole lines.
"""

from __future__ import annotations

import base64
import binascii

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_ssh_public_key

BEGIN = "-----BEGIN SSH HOST KEY KEYS-----"
END = "-----END SSH HOST KEY KEYS-----"
KEY_TYPE = "ssh-ed25519"
_BLOB_CHARS = 68  # base64 of the 51-byte blob: "ssh-ed25519" and 32 bytes of key, each with its length
_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


def host_key_block(public_lines: list[str]) -> str:
    """What a node prints: its public host keys ("TYPE BASE64 COMMENT") between the markers."""
    return "\n".join([BEGIN, *public_lines, END]) + "\n"


def ed25519_host_key(console: str) -> str | None:
    """The ed25519 key of the first complete host-key block in a console's text, as "ssh-ed25519 BASE64";
    None while there is no such block (the node has not printed it yet) or it holds no valid ed25519 key.
    The first block, because only what the node printed at first boot, before anything else ran on it,
    tells its own key."""
    start = console.find(BEGIN)
    end = console.find(END, start + len(BEGIN)) if start >= 0 else -1
    if end < 0:
        return None
    block = console[start + len(BEGIN) : end]
    at = block.find(KEY_TYPE + " ")
    if at < 0:
        return None
    blob = []
    for char in block[at + len(KEY_TYPE) :]:
        if char.isspace():
            continue  # the separator, or a line break of the console's wrapping
        if char not in _BASE64:
            break
        blob.append(char)
        if len(blob) == _BLOB_CHARS:
            break
    encoded = "".join(blob)
    try:
        key = load_ssh_public_key(f"{KEY_TYPE} {encoded}".encode())
    except (ValueError, binascii.Error, UnsupportedAlgorithm):
        return None
    if not isinstance(key, Ed25519PublicKey) or len(base64.b64decode(encoded)) != 51:
        return None
    return f"{KEY_TYPE} {encoded}"
