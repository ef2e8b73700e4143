"""The rows of a CSV trace with their line numbers, stripped, blank rows skipped, for both CSV formats."""

from __future__ import annotations

import csv
from collections.abc import Iterator

from simulation.traces.errors import TraceError


def csv_rows(text: str, where: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, stripped fields) of every non-blank row; a row csv cannot read is a TraceError."""
    reader = csv.reader(text.splitlines())
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # a NUL byte, an unterminated quote
            raise TraceError(f"{where}:{reader.line_num}: not CSV: {exc}") from None
        fields = [f.strip() for f in row]
        if any(fields):
            yield reader.line_num, fields
