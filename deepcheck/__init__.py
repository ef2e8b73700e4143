"""DeepCheck: asynchronous multilevel checkpointing for PyTorch + MPI jobs that survive Spot interruptions.

    ck = deepcheck.init(MPI.COMM_WORLD, role="trainer", directory=...)   # or "holder" / "both"
    ck.save(state, step)          # returns after the L0 host snapshot
    ck.wait(deepcheck.Level.L2)   # optional: block until durable
    restored = ck.restore()       # newest checkpoint that verifies, or None
    ck.close()

See deepcheck/README.md for levels, guarantees and the example.
"""

from .api import DeepCheck, FlushReport, Restored, SaveHandle, init
from .errors import CheckpointTimeout, ConfigError, CorruptCheckpointError, DeepCheckError, StateError
from .manifest import CheckpointId
from .protocol import Level
from .restore import CheckpointInfo
from .storage_s3 import S3Config

__all__ = [
    "CheckpointId",
    "CheckpointInfo",
    "CheckpointTimeout",
    "ConfigError",
    "CorruptCheckpointError",
    "DeepCheck",
    "DeepCheckError",
    "FlushReport",
    "Level",
    "Restored",
    "S3Config",
    "SaveHandle",
    "StateError",
    "init",
]
