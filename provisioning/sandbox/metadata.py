"""The instance-metadata endpoint of a sandbox host, and the notices posted to it.

It answers like EC2's IMDSv2 (the only mode deepvm's launch template allows): PUT /latest/api/token for a
session token, then GETs with that token. A Spot interruption is two files in the host's `notices`
directory, written by `deepvm interrupt`: `spot/instance-action` and `events/recommendations/rebalance`
answer 404 until those exist, exactly as on EC2 (`--rebalance-only` writes the second alone). Training
processes on the host find the endpoint through AWS_EC2_METADATA_SERVICE_ENDPOINT, which the host's sshd
sets for every session.

An instance that holds an instance profile (the cluster's head) gets its role's credentials under
iam/security-credentials/ and iam/info, as on EC2 (`provisioning.sandbox.credentials`), so botocore's
default chain finds them there; the others answer 404.
"""

from __future__ import annotations

import json
import os
import secrets
import socketserver
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provisioning.core.atomicfile import write_text_atomic
from provisioning.sandbox.shared import iso_time

if TYPE_CHECKING:
    from provisioning.sandbox.credentials import InstanceCredentials

METADATA_PORT = 8775  # on the host's own IP; EC2 uses 169.254.169.254:80
NOTICES = "notices"
INSTANCE_ACTION = "instance-action.json"
REBALANCE = "rebalance.json"
_MAX_TTL = 21600


def endpoint_url(ip: str) -> str:
    return f"http://{ip}:{METADATA_PORT}/"


def post_interruption(host_dir: Path, deadline: datetime, now: datetime | None = None) -> None:
    """Post a rebalance recommendation and a Spot interruption notice ("terminate" at `deadline`), as
    AWS FIS's send-spot-instance-interruptions makes EC2 post them: both at once."""
    post_rebalance(host_dir, now)
    write_text_atomic(
        host_dir / NOTICES / INSTANCE_ACTION, json.dumps({"action": "terminate", "time": iso_time(deadline)})
    )


def post_rebalance(host_dir: Path, now: datetime | None = None) -> None:
    """Post a rebalance recommendation alone: the instance is at elevated risk, and nothing more happens
    (EC2 sends many that are never followed by an interruption)."""
    notices = host_dir / NOTICES
    notices.mkdir(exist_ok=True)
    write_text_atomic(notices / REBALANCE, json.dumps({"noticeTime": iso_time(now or datetime.now(timezone.utc))}))


def interruption_deadline(host_dir: Path) -> datetime | None:
    """When the posted interruption is due, or None if there is none."""
    try:
        notice = json.loads((host_dir / NOTICES / INSTANCE_ACTION).read_text())
    except (OSError, ValueError):
        return None
    return datetime.strptime(notice["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


class MetadataServer(ThreadingHTTPServer):
    """IMDSv2 for one host. `notices_fd` is a directory descriptor opened before the host's mounts hide
    the host directory's path, so notices posted from outside stay readable."""

    daemon_threads = True

    def __init__(
        self,
        ip: str,
        facts: dict[str, str],
        user_data: str,
        notices_fd: int,
        credentials: InstanceCredentials | None = None,  # None: the host never holds a profile
    ) -> None:
        self.facts = facts
        self.user_data = user_data
        self.notices_fd = notices_fd
        self.credentials = credentials
        self.tokens: dict[str, float] = {}
        self.lock = threading.Lock()
        super().__init__((ip, METADATA_PORT), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN (a DNS query); a metadata endpoint needs none.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def new_token(self, ttl: int) -> str:
        token = secrets.token_urlsafe(32)
        with self.lock:
            self.tokens[token] = time.monotonic() + ttl
        return token

    def token_valid(self, token: str | None) -> bool:
        with self.lock:
            return token is not None and self.tokens.get(token, 0) > time.monotonic()

    def notice(self, name: str) -> str | None:
        try:
            fd = os.open(name, os.O_RDONLY, dir_fd=self.notices_fd)
        except OSError:
            return None
        with os.fdopen(fd) as f:
            return f.read()

    def lookup(self, path: str) -> str | None:
        """The body for a metadata path, or None for 404."""
        meta = "/latest/meta-data/"
        if path == "/latest/user-data":
            return self.user_data
        if not path.startswith(meta):
            return None
        key = path[len(meta) :].rstrip("/")
        notices = {"spot/instance-action": INSTANCE_ACTION, "events/recommendations/rebalance": REBALANCE}
        if key in notices:
            return self.notice(notices[key])
        if key == "spot/termination-time":
            action = self.notice(INSTANCE_ACTION)
            return None if action is None else json.loads(action)["time"]
        if key.startswith("iam/"):
            return self.iam(key[len("iam/") :])
        if key == "":
            iam = ["iam/"] if self.iam("info") is not None else []
            return "\n".join(sorted({*self.facts, *notices, *iam})) + "\n"
        return self.facts.get(key)

    def iam(self, key: str) -> str | None:
        """iam/info, iam/security-credentials/ (the role's name) and .../ROLE (its credentials)."""
        if self.credentials is None:
            return None
        profile = self.credentials.profile()
        if profile is None:
            return None
        if key == "info":
            return json.dumps(
                {
                    "Code": "Success",
                    "LastUpdated": iso_time(datetime.now(timezone.utc)),
                    "InstanceProfileArn": profile.arn,
                    "InstanceProfileId": profile.profile_id,
                }
            )
        if key == "security-credentials":
            return profile.role_name  # no newline: botocore puts the answer into the next path as it is
        prefix = "security-credentials/"
        if key.startswith(prefix):
            found = self.credentials.credentials(key[len(prefix) :])
            return None if found is None else json.dumps(found.document())
        return None


class _Handler(BaseHTTPRequestHandler):
    server: MetadataServer
    protocol_version = "HTTP/1.1"

    def do_PUT(self) -> None:
        if self.path != "/latest/api/token":
            return self._reply(404, "Not Found")
        try:
            ttl = int(self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", ""))
        except ValueError:
            return self._reply(400, "Missing or invalid X-aws-ec2-metadata-token-ttl-seconds")
        if not 1 <= ttl <= _MAX_TTL:
            return self._reply(400, "Invalid X-aws-ec2-metadata-token-ttl-seconds")
        self._reply(200, self.server.new_token(ttl), {"X-aws-ec2-metadata-token-ttl-seconds": str(ttl)})

    def do_GET(self) -> None:
        if not self.server.token_valid(self.headers.get("X-aws-ec2-metadata-token")):
            return self._reply(401, "Unauthorized")
        body = self.server.lookup(self.path)
        self._reply(404, "Not Found") if body is None else self._reply(200, body)

    def _reply(self, code: int, body: str, headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return
