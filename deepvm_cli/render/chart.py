"""A line chart in text, for a terminal: Unicode braille cells (2 x 4 dots each), so that 40 columns by 8
rows place 80 x 32 points, and a one-row sparkline of block characters for a metric beside it."""

from __future__ import annotations

import math
from collections.abc import Sequence

_BRAILLE = 0x2800
_DOTS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))  # [row within the cell][column within it]
_BLOCKS = "▁▂▃▄▅▆▇█"

Point = tuple[int, float]  # (step, value)


def line_chart(points: Sequence[Point], width: int, height: int) -> list[str]:
    """`height` rows of `width` characters drawing value against step (steps spread over the width, values
    from their lowest at the bottom to their highest at the top; NaN and infinities left out)."""
    rows, cols = height * 4, width * 2
    grid = [[0] * width for _ in range(height)]
    finite = [(s, v) for s, v in points if math.isfinite(v)]
    if finite and width > 0 and height > 0:
        first, last = finite[0][0], finite[-1][0]
        low, high = min(v for _, v in finite), max(v for _, v in finite)
        previous: tuple[int, int] | None = None
        for step, value in finite:
            x = 0 if last == first else round((step - first) / (last - first) * (cols - 1))
            y = rows - 1 - (0 if high == low else round((value - low) / (high - low) * (rows - 1)))
            # join to the previous point with a vertical run, so that a steep fall stays a line
            top, bottom = (y, y) if previous is None or previous[0] != x - 1 else sorted((y, previous[1]))
            for dot_y in range(top, bottom + 1):
                grid[dot_y // 4][x // 2] |= _DOTS[dot_y % 4][x % 2]
            previous = (x, y)
    return ["".join(chr(_BRAILLE + cell) if cell else " " for cell in row) for row in grid]


def sparkline(values: Sequence[float], width: int) -> str:
    """The last `width` values as block characters, lowest to highest (NaN and infinities as spaces)."""
    shown = list(values)[-width:] if width > 0 else []
    finite = [v for v in shown if math.isfinite(v)]
    if not finite:
        return " " * len(shown)
    low, high = min(finite), max(finite)
    span = high - low or 1.0
    return "".join(_BLOCKS[round((v - low) / span * (len(_BLOCKS) - 1))] if math.isfinite(v) else " " for v in shown)
