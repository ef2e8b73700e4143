"""`python -m training.node.script_main SCRIPT ARGS...`: a launched script (training.node.launched) run as
`python SCRIPT ARGS` would run it, by a process that can be a fork of the node's warm server (training.node.warm).

Why: a relaunch waits for its slowest script, and a cold script began by importing torch (a second on the
sandbox's cores; CUDA's libraries besides on a GPU node) and DDP's first init its compiler stack (another second:
benchmarks/notice_to_training_bench.py); the warm server has both imported, as it has for deepvm's own ranks.
So the rank starts this module through the warm starter, and it runs the script as `__main__`, with the
script's directory first on sys.path, under the job environment's interpreter's name and packages (the ones
setup's $DEEPVM_PIP installed: training.node.jobenv), its output unbuffered when PYTHONUNBUFFERED asks, as an
interpreter started so would have it. Without a warm server the starter runs this module cold, the same way.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: python -m training.node.script_main SCRIPT [ARGS...]")
    python = os.environ.get("DEEPVM_PYTHON")
    if python:
        from training.node import jobenv

        jobenv.use(Path(python).parent.parent)  # the job environment's packages, as its interpreter has them
        sys.executable = python  # what the script's own subprocesses (multiprocessing's spawn) start
    if os.environ.get("PYTHONUNBUFFERED"):
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(line_buffering=True, write_through=True)  # type: ignore[union-attr]
    script = Path(argv[0]).resolve()
    sys.argv = [str(script), *argv[1:]]
    sys.path.insert(0, str(script.parent))
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
