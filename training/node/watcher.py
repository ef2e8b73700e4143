"""Spot interruption watcher: polls the node's instance metadata (IMDSv2) for notices.

EC2 gives a Spot instance two minutes between the interruption notice and the interruption. The notice
appears at `spot/instance-action` (404 until then); a rebalance recommendation, an earlier hint that the
instance is at elevated risk (and often never followed by an interruption), appears at
`events/recommendations/rebalance`. The watcher reports each kind once, as its own `NoticeKind`: a
recommendation seen alone (it goes on watching for the interruption notice after it), and the
interruption notice (nothing comes after it; with it, a recommendation is moot). What a node does about
either is its caller's to decide.

IMDSv2 only (the launch template requires it): PUT a session token, then GET with the token; a token is
renewed before it expires. The endpoint is $AWS_EC2_METADATA_SERVICE_ENDPOINT (as boto3 reads it; the
sandbox sets it for every SSH session), else EC2's link-local address.

A failed poll is retried with exponential backoff (2 s doubling to 30 s, with jitter), as
aws-node-termination-handler retries its metadata requests: a metadata endpoint that is slow to answer at
boot, or blips, must not leave a Spot node unwatched for the rest of its life. After three failures in a
row with no answer ever, the watcher says so (`on_unavailable`, once: a laptop or a test has no endpoint)
and keeps trying at the slowest pace.

`python -m training.node.watcher --once` prints the current notice as one JSON line (or `null`): the
controller runs it over SSH before a launch, so a node noticed between two runs is never used.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from training.shared.events import Notice, NoticeKind

DEFAULT_ENDPOINT = "http://169.254.169.254/"
ENDPOINT_ENV = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
# AWS suggests checking every 5 s (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html);
# each second here: the notice's detection is on the relaunch's path (notice -> training again), and a poll
# is two link-local GETs of well under a millisecond each, far below IMDS's per-instance throttling
POLL_S = 1.0
RETRY_S = (2.0, 30.0)  # the wait after a failed poll, doubling up to the second value
ONCE_ATTEMPTS = 3  # tries of `--once` (0.5 s, then 1 s apart)
OFF_AFTER = 3  # failed polls in a row, with no answer ever, before the watcher says it cannot watch
_TOKEN_TTL_S = 21600
_PATHS = {  # the most urgent first
    NoticeKind.INTERRUPTION: "latest/meta-data/spot/instance-action",
    NoticeKind.REBALANCE: "latest/meta-data/events/recommendations/rebalance",
}


class MetadataUnavailable(Exception):
    """No IMDSv2 endpoint answers here (not on EC2 and no sandbox endpoint set)."""


class Imds:
    """A minimal IMDSv2 client: token, then GETs; None for a 404 (no such document yet)."""

    def __init__(self, endpoint: str | None = None, timeout_s: float = 1.0) -> None:
        base = endpoint or os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT
        self.base = base if base.endswith("/") else base + "/"
        self.timeout_s = timeout_s
        self._token: tuple[str, float] | None = None

    def _fresh_token(self) -> str:
        if self._token is None or self._token[1] < time.monotonic():
            request = urllib.request.Request(
                self.base + "latest/api/token",
                method="PUT",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": str(_TOKEN_TTL_S)},
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                    token = reply.read().decode()
            except (urllib.error.URLError, OSError) as exc:
                raise MetadataUnavailable(f"no instance metadata at {self.base}: {exc}") from None
            self._token = (token, time.monotonic() + _TOKEN_TTL_S / 2)
        return self._token[0]

    def get(self, path: str) -> str | None:
        request = urllib.request.Request(self.base + path, headers={"X-aws-ec2-metadata-token": self._fresh_token()})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                return reply.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            if exc.code == 401:  # token expired or endpoint restarted: get a new one next time
                self._token = None
            raise MetadataUnavailable(f"{self.base}{path}: HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise MetadataUnavailable(f"{self.base}{path}: {exc}") from None

    def notices(self) -> list[Notice]:
        """The notices posted now, the interruption notice first."""
        posted = []
        for kind, path in _PATHS.items():
            body = self.get(path)
            if body is not None:
                posted.append(Notice(kind, body, time.time()))
        return posted

    def notice(self) -> Notice | None:
        """The most urgent notice posted now (the interruption notice before a recommendation), or None."""
        return next(iter(self.notices()), None)


class Watcher(threading.Thread):
    """Polls every `interval_s` and calls `on_notice`, from this thread, once for each kind of notice as
    it appears; ends after the interruption notice (or `stop()`). See the module docstring for failures."""

    def __init__(
        self,
        on_notice: Callable[[Notice], None],
        on_unavailable: Callable[[str], None] = lambda reason: None,
        interval_s: float = POLL_S,
        imds: Imds | None = None,
        retry_s: tuple[float, float] = RETRY_S,
    ) -> None:
        super().__init__(name="spot-watcher", daemon=True)
        self.imds = imds or Imds()
        self.on_notice = on_notice
        self.on_unavailable = on_unavailable
        self.interval_s = interval_s
        self.retry_s = retry_s
        self._halt = threading.Event()

    def run(self) -> None:
        reported: set[NoticeKind] = set()
        failures, answered = 0, False
        while not self._halt.is_set():
            try:
                posted = self.imds.notices()
            except MetadataUnavailable as exc:
                failures += 1
                if failures == OFF_AFTER and not answered:
                    self.on_unavailable(f"{exc} (still trying every {self.retry_s[1]:g} s)")
                self._halt.wait(self._backoff(failures))
                continue
            failures, answered = 0, True
            notice = next(iter(posted), None)  # the interruption notice makes a recommendation moot
            if notice is not None and notice.kind not in reported:
                reported.add(notice.kind)
                self.on_notice(notice)
            if NoticeKind.INTERRUPTION in reported:
                return  # nothing comes after it
            self._halt.wait(self.interval_s)

    def _backoff(self, failures: int) -> float:
        """The wait after the `failures`-th failed poll in a row: doubling, capped, with up to 25% jitter
        so that the nodes of a cluster do not all ask at the same moment."""
        first, longest = self.retry_s
        wait = min(first * 2 ** (failures - 1), longest)
        return wait * (1 + random.uniform(0, 0.25))

    def stop(self) -> None:
        self._halt.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.node.watcher", description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="print the current notice (or null) and exit")
    args = parser.parse_args(argv)
    if not args.once:
        parser.error("only --once is supported from the command line; ranks run the Watcher thread")
    notice = None
    for attempt in range(ONCE_ATTEMPTS):
        try:
            notice = Imds().notice()
            break
        except MetadataUnavailable:  # retried: a blip must not pass a noticed node as fit
            if attempt + 1 < ONCE_ATTEMPTS:
                time.sleep(0.5 * 2**attempt)
    # after the last failure: nothing to watch on this node, so it cannot be noticed either
    print(json.dumps(None if notice is None else notice.to_dict()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
