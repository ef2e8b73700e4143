"""configs/own_train.py (pushed beside this file), held to a slow pace until the test releases it.

The managed e2e needs a job that is still training when the test checks, more than two minutes after the
user's machine is gone (twice the head's lease), and that ends soon after. A CPU-bound job's length is
the machine's: minutes too long on CI's two cores, too short on a fast machine, and on a loaded one the
test's own commands may outlast it. Here each step takes at least FLOOR_S seconds until a file named
RELEASE exists in the node's home; from then on the rank trains at full speed. The test creates it
once it has seen what it waits for, so the job's length follows the test's, and the example script
still trains for real (DDP, checkpoints, notices) all along.

Usage (a job file's `run:`): paced_train.py FLOOR_S RELEASE [own_train.py's options]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import own_train


def main() -> None:
    floor_s, release = float(sys.argv.pop(1)), Path.home() / sys.argv.pop(1)
    batch = own_train.SyntheticImages.batch  # called once per step, before its compute
    last = time.monotonic()

    def paced_batch(data: own_train.SyntheticImages, step: int, rank: int, size: int):
        nonlocal last, floor_s
        if floor_s and release.exists():
            floor_s = 0.0
        time.sleep(max(0.0, floor_s - (time.monotonic() - last)))
        last = time.monotonic()
        return batch(data, step, rank, size)

    own_train.SyntheticImages.batch = paced_batch
    own_train.main()


if __name__ == "__main__":
    main()
