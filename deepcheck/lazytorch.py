"""torch, only where a process already uses it.

DeepCheck's byte-only parts (holder ranks, small byte states, the CLI reading manifests) run without
torch: importing it costs ~2 s of CPU and ~300 MB per process. Code that handles user values asks
`loaded()`: a state can hold tensors only if the process has imported torch.

`sys.modules` alone is not enough: while one thread is importing torch (the digest of a large shard on
DeepCheck's service thread), the module is already there, half-initialized, without `torch.Tensor`.
The `import` statement waits for an import in progress to finish; a bare lookup does not.
"""

from __future__ import annotations

import sys
from typing import Any


def loaded() -> Any:
    """The torch module if this process imports it (waiting for an import in progress), else None."""
    if "torch" not in sys.modules:
        return None
    import torch

    return torch
