"""Keeps a managed job's service running on the head: `python -m training.head.job_supervisor JOB_ROOT`.

Where the head runs systemd (AWS images), the client starts this process as a transient systemd unit
that is itself restarted on failure; where there is none (the sandbox's hosts), it is started detached
(setsid) and is the only supervisor. Either way this is the process that decides, from the service's
exit code, whether the job is over (0: completed or cancelled; service.FINAL: failed for good), handed to a
new head (service.HANDED_OVER: nothing ends here) or the controller crashed and must come back, after a pause
that doubles with each crash (restart_delay) and a line saying what it last wrote. A controller
that keeps crashing is given up on after _MAX_CRASHES within _CRASH_WINDOW_S, and the job is marked failed,
rather than restarted forever while the cluster bills. Once the job is over, for good, the supervisor runs
its end (training/head/job_end.py: the summary, the hook, the outputs to S3, autodown).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

from training.head import job_end
from training.head.job_service import FINAL, HANDED_OVER
from training.head.joblog import JobLog
from training.shared.jobstore import JobStatus, JobStore

_MAX_CRASHES = 5
_CRASH_WINDOW_S = 600.0
_RESTART_DELAY_S = 1.0  # after the first crash; doubled after each more in the window
_MAX_RESTART_DELAY_S = 60.0


def restart_delay(crashes: int) -> float:
    """Seconds before the controller's restart after its `crashes`-th crash in the window: 1, 2, 4, 8, ...
    A fault that outlasts a restart (a full disk, the API away) gets time to pass instead of five crashes in
    twelve seconds, and the job is still given up on within minutes."""
    return min(_RESTART_DELAY_S * 2 ** max(crashes - 1, 0), _MAX_RESTART_DELAY_S)


def crash_line(output: Path) -> str:
    """The last line the crashed controller wrote (a traceback's last line says what it was), or ""."""
    try:
        with output.open("rb") as file:
            file.seek(max(file.seek(0, os.SEEK_END) - 4096, 0))
            lines = [line.strip() for line in file.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][-300:] if lines else ""


def _describe(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit {code}"


def supervise(root: Path) -> int:
    (root / "supervisor.pid").write_text(str(os.getpid()))
    crashes: deque[float] = deque()
    stopping = False

    def forward(signum: int, _frame: object) -> None:  # stop the service with us (systemd stop, kill)
        nonlocal stopping
        stopping = True
        if service is not None:
            service.send_signal(signal.SIGTERM)

    service: subprocess.Popen | None = None
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the SSH session that started us may end
    with open(root / "service.out", "ab") as output:
        while True:
            service = subprocess.Popen(
                [sys.executable, "-m", "training.head.job_service", str(root)],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
            )
            code = service.wait()
            if code == HANDED_OVER:  # the job runs on under its new head: no end here, no restart
                return 0
            if stopping:
                return 0 if code in (0, FINAL) else code
            if code in (0, FINAL):
                job_end.finish(root)
                return 0
            now = time.monotonic()
            crashes.append(now)
            while crashes and now - crashes[0] > _CRASH_WINDOW_S:
                crashes.popleft()
            delay = restart_delay(len(crashes))
            log = JobLog(root / "log.jsonl")
            try:
                if len(crashes) >= _MAX_CRASHES:
                    text = (
                        f"the controller crashed {len(crashes)} times in {_CRASH_WINDOW_S / 60:.0f} minutes "
                        f"(last: {_describe(code)}: {crash_line(root / 'service.out')}; see {root / 'service.out'}); "
                        "giving up"
                    )
                    _mark_failed(root.name, text)
                    log.state(JobStatus.FAILED, text)
                    log.close()
                    job_end.finish(root)
                    return FINAL
                said = crash_line(root / "service.out")
                log.note(
                    f"the controller stopped ({_describe(code)}{': ' + said if said else ''}); "
                    f"restarting it in {delay:g}s"
                )
            finally:
                log.close()  # closing twice is harmless
            time.sleep(delay)


def _mark_failed(job_id: str, text: str) -> None:
    jobs = JobStore()
    row = jobs.get(job_id)
    if row is not None:
        jobs.put(replace(row, status=JobStatus.FAILED, message=text))


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1]).resolve()))
