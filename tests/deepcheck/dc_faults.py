"""kill -9 cycles against real mpirun jobs (used by test_faults.py, default and soak sizes).

Each cycle starts fault_worker.py (2 trainers + 2 holders sharing one L2 directory), which first restores
and checks the restored bytes; the harness then checks that the restored step is no older than the
newest step the previous job reported durable, waits a random moment and kill -9s a trainer, a holder,
or the holder that is writing a file right now (found by the pid in the temporary file's name). The
rest of the job is then killed too (as mpirun would), and the next cycle restores from what is left.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from dc_mpi import mpi_env, mpirun_cmd

KINDS = ("trainer", "holder", "persisting")


@dataclass
class ChainResult:
    kills: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    restored: list[int] = field(default_factory=list)


def _wait_for(pred, timeout: float, proc: subprocess.Popen) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        if proc.poll() is not None:
            return bool(pred())
        time.sleep(0.005)
    return False


def _parse(log: Path) -> list[tuple[str, int]]:
    out = []
    for line in log.read_text().splitlines():
        word, _, num = line.partition(" ")
        out.append((word, int(num)))
    return out


class Chain:
    def __init__(self, root: Path, seed: int):
        self.root = root
        self.rng = random.Random(seed)
        self.ckdir, self.log, self.pids = root / "ck", root / "log", root / "pids"
        self.pids.mkdir(parents=True, exist_ok=True)
        # mpirun killed with SIGKILL leaves its session directory (8 MB of shared-memory files) behind:
        # keep them in this chain's directory, not in /tmp, where hundreds of cycles used to pile up.
        self.session_dir = root / "ompi"
        self.session_dir.mkdir(exist_ok=True)
        self.log.touch()
        self.result = ChainResult()
        self.floor = -1  # newest step reported durable (or restored) so far

    def _start(self, steps: int) -> subprocess.Popen:
        for f in self.pids.iterdir():
            f.unlink()
        cmd = mpirun_cmd(4, "fault_worker.py", str(self.ckdir), str(self.log), str(self.pids), str(steps))
        return subprocess.Popen(
            cmd,
            env=mpi_env(OMPI_MCA_orte_tmpdir_base=str(self.session_dir)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def _check_ready(self, proc: subprocess.Popen, readies: int) -> None:
        ok = _wait_for(lambda: sum(w == "ready" for w, _ in _parse(self.log)) > readies, 90, proc)
        if not ok:
            with contextlib.suppress(ProcessLookupError):  # the job may have died on its own: show why
                os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"job never restored (exit {proc.poll()}):\n{proc.communicate()[0][-3000:]}")
        events = _parse(self.log)
        restored = [n for w, n in events if w == "ready"][-1]
        assert restored >= self.floor, f"restored step {restored} is older than reported-durable step {self.floor}"
        self.result.restored.append(restored)

    def _victim(self, kind: str, proc: subprocess.Popen) -> tuple[str, int | None]:
        """(what is killed, pid); a persisting kill turns into a holder kill if no file is being written."""
        if kind == "persisting":
            found: list[int] = []

            def writing() -> bool:
                try:
                    found[:] = [int(p.name.split(".")[-3]) for p in self.ckdir.glob("*/.*.tmp")]
                except FileNotFoundError:  # a checkpoint directory pruned while the glob walked it
                    return False
                return bool(found)

            if _wait_for(writing, 5, proc):
                return kind, found[0]
            kind = "holder"
        time.sleep(self.rng.uniform(0.0, 0.6))
        names = sorted(f.name for f in self.pids.iterdir() if f.name.startswith(kind))
        return kind, int((self.pids / self.rng.choice(names)).read_text()) if names else None

    def cycle(self, kind: str) -> None:
        readies = sum(w == "ready" for w, _ in _parse(self.log))
        proc = self._start(steps=1_000_000)
        try:
            self._kill_during_saves(proc, kind, readies)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            shutil.rmtree(self.session_dir, ignore_errors=True)  # nothing of this chain runs any more
            self.session_dir.mkdir()
        self.floor = max([self.floor, *(n for w, n in _parse(self.log) if w in ("complete", "ready"))])

    def _kill_during_saves(self, proc: subprocess.Popen, kind: str, readies: int) -> None:
        self._check_ready(proc, readies)
        kind, victim = self._victim(kind, proc)
        if proc.poll() is not None:
            raise AssertionError(f"job ended before the kill:\n{proc.communicate()[0][-3000:]}")
        if victim is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        time.sleep(0.05)  # then the rest of the job dies too, as mpirun would make it
        self.result.kills[kind] += 1

    def finish(self) -> None:
        """A last, unharmed job: restore, one more save, clean close."""
        readies = sum(w == "ready" for w, _ in _parse(self.log))
        proc = self._start(steps=1)
        try:
            self._check_ready(proc, readies)
            out = proc.communicate(timeout=120)[0]
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 0, out[-3000:]
        assert _parse(self.log)[-1][0] == "closed"


def run_chain(root: Path, cycles: int, seed: int) -> ChainResult:
    chain = Chain(root, seed)
    for i in range(cycles):
        chain.cycle(KINDS[i % len(KINDS)])
    chain.finish()
    return chain.result
