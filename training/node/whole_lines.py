"""Passing output on a line a write: what mpirun's --tag-output needs to tag a line once, and what keeps a
writer that writes a line in pieces (faulthandler, print() of an unbuffered script: the text, then its end) from
splitting the lines of another writer of the same stream (a rank's event lines) in two."""

from __future__ import annotations

import os
import threading


def pass_whole_lines(source: int, target: int) -> None:
    """Copy `source` to `target` until its end, each line in one write (an unfinished last line too, at the end);
    closes `source`."""
    pending = b""
    try:
        while chunk := os.read(source, 1 << 16):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                os.write(target, line + b"\n")
        if pending:
            os.write(target, pending + b"\n")
    finally:
        os.close(source)


def whole_lines_into(target: int, name: str) -> tuple[int, threading.Thread]:
    """A pipe's write end whose output reaches `target` a line a write, through a thread (started) of its own."""
    read_end, write_end = os.pipe()
    thread = threading.Thread(target=pass_whole_lines, args=(read_end, target), name=name, daemon=True)
    thread.start()
    return write_end, thread
