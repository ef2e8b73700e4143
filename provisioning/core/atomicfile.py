"""Writing a file so that a reader finds the old content or the new, never half of it, even after a crash:
a temporary file beside it, flushed to disk, then renamed over it (a rename is atomic on one filesystem)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path`'s content with `text`; the temporary file is removed if anything fails (OSError
    passes through for the caller to name the file it was writing)."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
