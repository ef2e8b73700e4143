"""A receiver of the head's hook (training/head/notify.py) for the tests: a real HTTP server on 127.0.0.1 that
records each POST, used by the unit tests (tests/training/test_notify.py) and by a sandbox head's autodown
(tests/cloud/test_autodown_e2e.py: a sandbox host shares this machine's network namespace, so its processes
reach this loopback address)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from training.head.notify import EVENT_HEADER, SIGNATURE_HEADER


class Receiver:
    """An HTTP server on 127.0.0.1 that records each POST and answers with the next status of `answers`
    (200 once they run out); `gate`, while clear, holds every answer back."""

    def __init__(self, answers: list[int] | None = None) -> None:
        self.answers = list(answers or [])
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.gate = threading.Event()
        self.gate.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.gate.wait(10)
                receiver.posts.append((dict(self.headers), body))
                self.send_response(receiver.answers.pop(0) if receiver.answers else 200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"

    def events(self) -> list[dict[str, object]]:
        return [json.loads(body) for _, body in self.posts]

    def signed_events(self, secret: bytes) -> list[dict[str, object]]:
        """The events, each checked as a receiver must: its signature recomputed over the exact body and compared
        in constant time, its event header the body's; and each once, as a receiver must take them: delivery is
        at least once, and a try that timed out here (a loaded machine answers late) is retried with the same
        `id` (training/head/notify.py). A retry is the same body again; an event posted twice has two ids."""
        unique: dict[str, dict[str, object]] = {}
        for headers, body in self.posts:
            expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
            assert hmac.compare_digest(headers[SIGNATURE_HEADER], expected), headers
            assert headers[EVENT_HEADER] == json.loads(body)["event"] and headers["Content-Type"] == "application/json"
            event = json.loads(body)
            assert unique.setdefault(str(event["id"]), event) == event, "one id, two different events"
        return list(unique.values())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
