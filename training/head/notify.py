"""Word of what happened, from the head: `deepvm train --notify URL` (a signed JSON POST) or `--notify-cmd CMD`.

The format (README, "Word of what happened"): one JSON object per event,

    {"version": 1, "id": "<uuid4>", "event": "notice", "at": "2026-11-25T03:12:09Z", "job_id": "...",
     "cluster": "...", "message": "...", "summary": null | {...RunSummary...}}

POSTed with `Content-Type: application/json`, `X-Deepvm-Event: <event>` and
`X-Deepvm-Signature: sha256=<hex>`, the HMAC-SHA256 of the exact body with the config file's notify_secret
(handed to the head as a 0600 file, never on a command line). A receiver recomputes it over the raw body and
compares in constant time; `id` tells a retried delivery from a new event. `--notify-cmd` runs the command
with `sh -c` on the head, the same JSON on its stdin and DEEPVM_EVENT set; it is not signed (it runs where
the secret would be).

Events: notice, replacement, fallback (the ladder's on-demand stand-in), failure, completion, stopped,
cancelled, autodown; in the order they happened, from one sender thread per process. The controller's
events come from the job's service, the end and autodown from its supervisor (training/head/job_end.py),
which starts only after the service (and its sender) has finished.

Never holding the controller up: `post` queues and returns; one thread delivers, with a timeout on each try
and retries with growing pauses (a 5xx, a timeout, a refused connection; a 4xx but 408 and 429 is final).
A delivery that fails for good is said once in the job's log. `close(timeout)` gives the queue that long
to drain, so the autodown event leaves before the head terminates itself.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import queue
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path

from training.shared.guard import NotifyTarget
from training.shared.summary import RunSummary

TRY_TIMEOUT_S = 5.0  # one delivery attempt
PAUSES_S = (1.0, 2.0, 4.0, 8.0)  # between attempts: five in all, over about 15 s
SIGNATURE_HEADER = "X-Deepvm-Signature"
EVENT_HEADER = "X-Deepvm-Event"


class NotifyKind(str, Enum):
    """What a hook is told about."""

    NOTICE = "notice"  # a Spot interruption notice on a node of the job
    REPLACEMENT = "replacement"  # a replacement node was bought and is ready
    FALLBACK = "fallback"  # an on-demand stand-in was bought while Spot is short (the recovery ladder)
    FAILURE = "failure"  # the job failed (its reason in `message`)
    COMPLETION = "completion"  # the job completed
    STOPPED = "stopped"  # the job stopped at a limit (--max-duration, budget, deadline): resumable
    CANCELLED = "cancelled"  # `deepvm cancel`
    AUTODOWN = "autodown"  # the head takes the cluster down (why in `message`)

    def __str__(self) -> str:
        return self.value


# the controller's event kinds (Controller._event) that a hook hears of, and as what
CONTROLLER_EVENTS = {
    "notice": NotifyKind.NOTICE,
    "replacement": NotifyKind.REPLACEMENT,
    "fallback": NotifyKind.FALLBACK,
}


@dataclass(frozen=True)
class Notification:
    """One event as the hook receives it (the module docstring has the format)."""

    event: NotifyKind
    job_id: str
    cluster: str
    message: str
    summary: RunSummary | None = None  # the run's summary (training/head/summary.py), at its end
    id: str = ""
    at: str = ""
    version: int = 1

    def body(self) -> bytes:
        data = {**asdict(self), "event": self.event.value}
        return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def signature(secret: bytes, body: bytes) -> str:
    """The header's value for `body`: what a receiver recomputes and compares (hmac.compare_digest)."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


class Notifier:
    """Sends one job's notifications in order from a thread of its own; see the module docstring."""

    def __init__(
        self,
        target: NotifyTarget,
        secret: bytes,
        job_id: str,
        cluster: str,
        say: Callable[[str], None],
        pauses_s: tuple[float, ...] = PAUSES_S,
        try_timeout_s: float = TRY_TIMEOUT_S,
    ) -> None:
        self.target, self._secret, self.job_id, self.cluster, self._say = target, secret, job_id, cluster, say
        self._pauses, self._timeout = pauses_s, try_timeout_s
        self._queue: queue.Queue[Notification | None] = queue.Queue()
        self._thread = threading.Thread(target=self._send_all, name="notify", daemon=True)
        if target.wanted:
            self._thread.start()

    @classmethod
    def for_job(
        cls, target: NotifyTarget, root: Path, job_id: str, cluster: str, say: Callable[[str], None]
    ) -> Notifier:
        """The job's notifier, its secret read from the file `deepvm train` wrote beside job.json."""
        from training.shared.guard import SECRET_FILE

        secret_path = root / SECRET_FILE
        secret = secret_path.read_bytes().strip() if target.url and secret_path.exists() else b""
        return cls(target, secret, job_id, cluster, say)

    def post(self, event: NotifyKind, message: str, summary: RunSummary | None = None) -> None:
        """Queue one event; returns at once."""
        if self.target.wanted:
            at = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
            self._queue.put(Notification(event, self.job_id, self.cluster, message, summary, uuid.uuid4().hex, at))

    def controller_event(self, kind: str, message: str) -> None:
        """A controller event (JobReporter.event): posted when it is one a hook hears of."""
        if kind in CONTROLLER_EVENTS:
            self.post(CONTROLLER_EVENTS[kind], message)

    def close(self, timeout_s: float = 30.0) -> None:
        """Deliver what is queued, for at most `timeout_s`, then stop."""
        if not self.target.wanted:
            return
        self._queue.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._say(f"notify: events still undelivered after {timeout_s:g}s; giving up on them")

    def _send_all(self) -> None:
        while (item := self._queue.get()) is not None:
            error = ""
            for pause in (*self._pauses, None):
                error = self._send(item)
                if not error or error.startswith("final:") or pause is None:
                    break
                time.sleep(pause)
            if error:
                self._say(f"notify: could not deliver {item.event} to {self._where()}: {error.removeprefix('final: ')}")

    def _where(self) -> str:
        return self.target.url or "the --notify-cmd command"

    def _send(self, item: Notification) -> str:
        """One try: "" when delivered, else why ("final: ..." when retrying cannot help)."""
        body = item.body()
        if self.target.command:
            return self._run(item, body)
        request = urllib.request.Request(
            self.target.url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                EVENT_HEADER: item.event.value,
                SIGNATURE_HEADER: signature(self._secret, body),
                "User-Agent": "deepvm-notify/1",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as answer:
                answer.read()
        except urllib.error.HTTPError as exc:
            retry = exc.code >= 500 or exc.code in (408, 429)
            return f"{'' if retry else 'final: '}HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:  # refused, unreachable, timed out
            return str(getattr(exc, "reason", exc))
        return ""

    def _run(self, item: Notification, body: bytes) -> str:
        env = {**os.environ, "DEEPVM_EVENT": item.event.value}
        try:
            done = subprocess.run(
                ["sh", "-c", self.target.command],
                input=body,
                env=env,
                capture_output=True,
                timeout=max(self._timeout, 30.0),
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
        return "" if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.decode(errors='replace')[-200:]}"
