"""DeepCheck: asynchronous multilevel checkpointing for PyTorch + MPI jobs that survive Spot interruptions.

    ck = deepcheck.init(MPI.COMM_WORLD, role="trainer", directory=...)   # or "holder" / "both"
    ck.save(state, step)          # returns after the L0 host snapshot
    ck.wait(deepcheck.Level.L2)   # optional: block until durable
    restored = ck.restore()       # newest checkpoint that verifies, or None
    ck.close()

See deepcheck/README.md for levels, guarantees and the example.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import CheckpointTimeout, ConfigError, CorruptCheckpointError, DeepCheckError, StateError
from .manifest import CheckpointId
from .protocol import Level
from .storage_s3 import S3Config

if TYPE_CHECKING:
    from .api import DeepCheck, Failure, FlushReport, Restored, SaveHandle, init
    from .restore import CheckpointInfo

# Names whose modules import mpi4py.MPI, which initialises MPI in the importing process: loaded on first use, so
# that a process reading checkpoints' files (deepcheck.manifest, deepcheck.storage_disk: the head's controller,
# `deepvm fetch`) neither loads libmpi nor becomes an MPI singleton.
_NEEDS_MPI = {
    "DeepCheck": "api",
    "Failure": "api",
    "FlushReport": "api",
    "Restored": "api",
    "SaveHandle": "api",
    "init": "api",
    "CheckpointInfo": "restore",
}


def __getattr__(name: str) -> Any:
    if name not in _NEEDS_MPI:
        raise AttributeError(f"module 'deepcheck' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_NEEDS_MPI[name]}", __name__), name)


__all__ = [
    "CheckpointId",
    "CheckpointInfo",
    "CheckpointTimeout",
    "ConfigError",
    "CorruptCheckpointError",
    "DeepCheck",
    "DeepCheckError",
    "Failure",
    "FlushReport",
    "Level",
    "Restored",
    "S3Config",
    "SaveHandle",
    "StateError",
    "init",
]
