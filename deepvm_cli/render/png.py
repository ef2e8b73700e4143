"""A PNG drawn with matplotlib, for the commands that plot (`deepvm profile --plot`, `deepvm simulate --plot`).

matplotlib is imported only here and only when a plot is asked for (with the Agg backend: no display
needed), so `deepvm plan` never pays for it; a file that cannot be written is one InputError line.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from provisioning.core.errors import InputError


@contextmanager
def png_figure(path: Path, dpi: int, **subplots: Any) -> Iterator[tuple[Any, Any]]:
    """`plt.subplots(**subplots)` as (figure, axes), written to `path` when the block ends without error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(**subplots)
    try:
        yield figure, axes
        figure.savefig(path, dpi=dpi, format="png")  # whatever the name ends with: a .txt is no error
    except OSError as exc:
        raise InputError(f"cannot write the plot to {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(figure)
