"""The supervisor of one mpirun on the head node, which the controller starts there over SSH:

    python -m training.head.mpirun_guard [--grace S] [--lease S] -- mpirun ARGS...

mpirun runs in the cluster because Open MPI's daemons connect back to it, which they cannot do to a
laptop behind NAT or a firewall. The controller then needs a way to drive it from afar, and this is it:

- mpirun's stdout and stderr pass through line by line on the same streams (so `--tag-output` lines
  read as before), and this process exits with mpirun's exit code (128 + N when signal N ended it);
- stdin takes one command per line: `stop` sends SIGUSR1 to mpirun, which forwards it to every rank
  (the clean stop: trainers flush a checkpoint and leave); `kill [S]` is the hard stop: SIGTERM to
  mpirun (it takes its daemons and ranks down), then SIGKILL to everything it started on this node
  after S seconds (default --grace); `stacks` sends SIGUSR2 to mpirun, which forwards it to every rank
  (each prints its threads' stacks on stderr: training.node.rank); `ping` only says that the controller is
  alive;
- the end of stdin (the controller died, or its connection closed), no line for --lease seconds (a
  connection that died without closing), and SIGTERM or SIGHUP to this process are the hard stop too:
  a job never runs on without its controller (`deepvm train --resume` continues it).

Whatever mpirun started on this node is found and killed when it exits, however it ends: this process
is their subreaper, so even those that left mpirun's process group (Open MPI gives each local rank its
own) or lost their parent stay below it. mpirun runs in its own process group, so signals meant for
this process reach it only as this process decides, and it gets one SIGTERM if this process dies, even
by SIGKILL (through training.head.signal_relay, which says why it takes a process of its own). As root, Open MPI
must be told that running as root is meant.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import BinaryIO

from training.head.sweep import descendants, kill, sweep
from training.shared.prctl import become_subreaper

_DRAIN_S = 5.0  # after mpirun exits, how long its output may still take (something it left may hold the pipe)


class Mpirun:
    """The supervised mpirun and the two ways to stop it."""

    def __init__(self, command: Sequence[str]) -> None:
        env = dict(os.environ)
        if os.geteuid() == 0:  # Open MPI refuses root unless told; the sandbox runs as root
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        become_subreaper()
        self.proc = subprocess.Popen(  # through the signal_relay: see training/head/signal_relay.py for why
            [sys.executable, "-m", "training.head.signal_relay", "--", *command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self.exited = threading.Event()
        self.hard_stopping = threading.Event()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGUSR1)

    def ask_for_stacks(self) -> None:
        self.proc.send_signal(signal.SIGUSR2)

    def hard_stop(self, grace_s: float) -> None:
        if self.hard_stopping.is_set():
            return
        self.hard_stopping.set()
        self.proc.send_signal(signal.SIGTERM)
        if not self.exited.wait(grace_s):
            kill(descendants())  # mpirun and all it started; wait() reaps them

    def wait(self) -> int:
        """mpirun's exit code, once it and everything it left behind on this node are gone."""
        code = self.proc.wait()
        self.exited.set()
        sweep()
        return code


def _pass_lines(source: BinaryIO, target: BinaryIO) -> None:
    """Copy lines as they come. Once nobody reads them (the controller is gone) keep reading, so mpirun
    never blocks on a full pipe before the hard stop reaches it."""
    for line in source:
        with contextlib.suppress(OSError):
            target.write(line)
            target.flush()


def _read_commands(stdin: BinaryIO, commands: queue.Queue[str]) -> None:
    for raw in stdin:
        commands.put(raw.decode("utf-8", "replace").strip())
    commands.put("kill")  # the end of stdin: the controller is gone


def _say(text: str) -> None:
    with contextlib.suppress(OSError):
        print(f"mpirun_guard: {text}", file=sys.stderr, flush=True)


def _obey(commands: queue.Queue[str], mpirun: Mpirun, grace_s: float, lease_s: float | None) -> None:
    while True:
        try:
            line = commands.get(timeout=lease_s)
        except queue.Empty:
            _say(f"no word from the controller for {lease_s:g}s: stopping the job")
            line = "kill"
        word, _, argument = line.partition(" ")
        if word == "stop":
            mpirun.stop()
        elif word == "stacks":
            mpirun.ask_for_stacks()
        elif word == "kill":
            try:
                seconds = float(argument) if argument else grace_s
            except ValueError:
                seconds = grace_s
            mpirun.hard_stop(seconds)
            return
        elif word != "ping":
            _say(f"unknown command {line!r} ignored (stop, stacks, kill [SECONDS] or ping)")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m training.head.mpirun_guard", description=__doc__.splitlines()[0])
    p.add_argument("--grace", type=float, default=10.0, help="seconds from SIGTERM to SIGKILL in a hard stop")
    p.add_argument("--lease", type=float, help="hard stop when no line came on stdin for this many seconds")
    p.add_argument("command", nargs="+", help="mpirun and its arguments, after --")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    commands: queue.Queue[str] = queue.Queue()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: commands.put("kill"))
    try:
        mpirun = Mpirun(opts.command)
    except OSError as exc:
        _say(f"cannot start {opts.command[0]}: {exc}")
        return 127
    pumps = [
        threading.Thread(target=_pass_lines, args=(mpirun.proc.stdout, sys.stdout.buffer), daemon=True),
        threading.Thread(target=_pass_lines, args=(mpirun.proc.stderr, sys.stderr.buffer), daemon=True),
    ]
    for pump in pumps:
        pump.start()
    stdin = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115 - read until exit
    # unbuffered: a thread blocked in a buffered read at exit would hold its lock, which Python aborts on
    threading.Thread(target=_read_commands, args=(stdin, commands), daemon=True).start()
    threading.Thread(target=_obey, args=(commands, mpirun, opts.grace, opts.lease), daemon=True).start()
    code = mpirun.wait()
    for pump in pumps:
        pump.join(_DRAIN_S)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
