"""The rows of a CSV trace with their line numbers, stripped, blank rows skipped, for both CSV formats."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator

from simulation.traces.errors import TraceError

RowProgress = Callable[[int, int], None]  # (lines read, lines in the file): a long file's parse shows progress
PROGRESS_EVERY = 50_000  # lines between two progress calls (a 10^6-line file: 20 updates, ~0.3 s apart)


def csv_rows(text: str, where: str, progress: RowProgress | None = None) -> Iterator[tuple[int, list[str]]]:
    """(line number, stripped fields) of every non-blank row; a row csv cannot read is a TraceError."""
    lines = text.splitlines()
    reader = csv.reader(lines)
    try:
        for row in reader:
            fields = [f.strip() for f in row]
            if any(fields):
                yield reader.line_num, fields
            if progress is not None and reader.line_num % PROGRESS_EVERY == 0:
                progress(reader.line_num, len(lines))
    except csv.Error as exc:  # a NUL byte, an unterminated quote
        raise TraceError(f"{where}:{reader.line_num}: not CSV: {exc}") from None
