"""A real IMDSv2 endpoint (the sandbox hosts' own) on a random loopback address, for watcher tests."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

from provisioning.sandbox.metadata import NOTICES, MetadataServer, endpoint_url, post_interruption, post_rebalance


def loopback_ip() -> str:
    """A random address of 127/8 for an endpoint of its own."""
    return f"127.{random.randint(2, 250)}.{random.randint(1, 250)}.{random.randint(1, 250)}"


@contextmanager
def imds_endpoint(host_dir: Path, ip: str | None = None) -> Iterator[str]:
    """Serve IMDSv2 with notices read from host_dir/notices (on `ip`, else a random loopback address);
    yields the endpoint URL."""
    (host_dir / NOTICES).mkdir(exist_ok=True)
    fd = os.open(host_dir / NOTICES, os.O_RDONLY | os.O_DIRECTORY)
    ip = ip or loopback_ip()
    server = MetadataServer(ip, {"instance-id": "i-test", "instance-life-cycle": "spot"}, "", fd)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield endpoint_url(ip)
    finally:
        server.shutdown()
        server.server_close()
        os.close(fd)


def post_notice(host_dir: Path) -> None:
    """What `deepvm interrupt` does to a sandbox host: a rebalance and a two-minute notice."""
    post_interruption(host_dir, datetime.now(timezone.utc) + timedelta(seconds=120))


def post_rebalance_only(host_dir: Path) -> None:
    """What `deepvm interrupt --rebalance-only` does to a sandbox host: a rebalance recommendation alone."""
    post_rebalance(host_dir)


def clear_notices(host_dir: Path) -> None:
    for path in (host_dir / NOTICES).iterdir():
        path.unlink()
