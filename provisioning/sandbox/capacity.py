"""How many sandbox nodes this machine can host, measured before `deepvm up` boots any.

Every sandbox node is a set of real processes on this machine, so a plan that is harmless on AWS can
exhaust it (a count of 10^9 once booted 247 hosts on a 2-core machine before the subnet ran dry). Two
limits, from what the machine has now (available memory, usable CPUs):
- bootable: an idle node is its init (Python, 23 MiB resident as measured) with its metadata endpoint,
  and sshd (9 MiB); it is counted at IDLE_NODE_MIB for headroom. A plan above this is refused: booting
  it would run the machine out of memory before anything could be trained.
- trainable: a training node runs a PyTorch rank (PyTorch alone is 207 MiB resident as measured;
  ResNet-18 with gradients, optimizer state and DeepCheck's buffers brings it to about half a GiB),
  counted at TRAINING_NODE_MIB; and the ranks of one step share the CPUs, so beyond TRAINERS_PER_CPU
  per CPU a step mostly waits for a core. A plan above this boots, with a warning
  that training on all of it will be slow or run out of memory (the rehearsal's 4 nodes on 2 CPUs are
  within it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from provisioning.core.errors import InputError

IDLE_NODE_MIB = 64
TRAINING_NODE_MIB = 1024
TRAINERS_PER_CPU = 2


@dataclass(frozen=True)
class HostCapacity:
    """What this machine has for sandbox nodes now."""

    cpus: int  # CPUs this process may run on
    available_mib: int  # MemAvailable: what can be used without swapping

    @property
    def bootable(self) -> int:
        return self.available_mib // IDLE_NODE_MIB

    @property
    def trainable(self) -> int:
        return max(1, min(self.cpus * TRAINERS_PER_CPU, self.available_mib // TRAINING_NODE_MIB))

    def describe(self) -> str:
        return f"{self.cpus} CPUs and {self.available_mib / 1024:.1f} GiB of available memory"


def measure(meminfo: Path = Path("/proc/meminfo")) -> HostCapacity:
    """This machine's capacity, from the CPUs this process may use and the kernel's MemAvailable."""
    available_kib = next(
        int(line.split()[1]) for line in meminfo.read_text().splitlines() if line.startswith("MemAvailable:")
    )
    return HostCapacity(cpus=len(os.sched_getaffinity(0)), available_mib=available_kib // 1024)


def check_fits(nodes: int, capacity: HostCapacity) -> str | None:
    """A warning when `nodes` will boot but train slowly; an InputError when they would not fit at all."""
    if nodes > capacity.bootable:
        raise InputError(
            f"the sandbox cannot host {nodes} nodes on this machine ({capacity.describe()}: at most "
            f"{capacity.bootable}); plan a smaller cluster, e.g. `deepvm plan --node-limit "
            f"{capacity.trainable} --offline`"
        )
    if nodes > capacity.trainable:
        return (
            f"this machine ({capacity.describe()}) trains on about {capacity.trainable} sandbox nodes; "
            f"the plan's {nodes} will boot, but training on all of them will be slow or run out of memory"
        )
    return None
