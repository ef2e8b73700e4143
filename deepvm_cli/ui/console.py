"""The only place that prints. Data goes to stdout; progress, warnings and errors go to stderr.

`--json` output bypasses rich entirely so that scripts get exactly one JSON document on stdout.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console

from training.shared import strict_json
from training.shared.timespan import duration as duration  # the CLI's name for it (console.duration)


def new_consoles() -> tuple[Console, Console]:
    """stdout's and stderr's consoles, as the environment says now: rich reads TTY_INTERACTIVE, NO_COLOR and a
    set COLUMNS when a console is made. Made once at import; tests that run many command lines in one process,
    each with an environment of its own, make them again per line.

    stderr is wrapped at the terminal's width only on a terminal: into a pipe or a file (CI, `2> log`) a
    message stays one line, so a path or a command in it is never cut where rich's default 80 columns fall."""
    err = Console(stderr=True, highlight=False)
    err.soft_wrap = not err.is_terminal
    return Console(highlight=False, soft_wrap=False), err


out, err = new_consoles()


def info(message: str) -> None:
    err.print(message)


def verbatim(line: str) -> None:
    """One line of data on stdout that is someone else's text (a script's output in `deepvm logs`), never markup:
    on a terminal as rich prints it, wrapped at the screen's width; into a pipe or a file exactly as given, so
    `deepvm logs JOB | grep ...` finds what the script printed (rich wrapped it at 80 columns there, expanded its
    tabs and made `:thumbs_up:` an emoji)."""
    if out.is_terminal:
        out.print(line, markup=False, highlight=False)
        return
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()  # `logs -f | grep --line-buffered` sees each line as it comes
    except BrokenPipeError:  # the reader left (`deepvm logs JOB | head`): end quietly, as rich's own output does
        out.on_broken_pipe()


def plain(message: str) -> None:
    """One unstyled, unwrapped line on stderr: streamed logs and progress when stderr is not a terminal."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


@contextmanager
def stages(first: str) -> Iterator[Callable[[str], None]]:
    """One line on stderr while a long computation runs: a spinner, the stage it is in, the time so far.

    The caller names each new stage through the function it gets. The line is erased at the end, and
    drawn only on an interactive terminal: a script's stderr gets nothing (an error stays one line).
    """
    if not err.is_interactive:
        yield lambda stage: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    line = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err, transient=True)
    task = line.add_task(first, total=None)
    with line:
        yield lambda stage: line.update(task, description=stage, refresh=True)


def warning(message: str) -> None:
    """One warning line; the message is text, never markup (a YAML error's `[`, a path's brackets)."""
    from rich.markup import escape

    err.print(f"[yellow]warning:[/] {escape(message)}")


def error_line(message: str) -> None:
    """One plain line on stderr, never wrapped or styled, so scripts and tests can match it exactly.

    A message may quote what the user gave; its newlines, NULs and invisible characters (a right-to-left
    override) are shown escaped, so they can neither split the line nor disguise it."""
    sys.stderr.write(f"deepvm: error: {printable(message)}\n")
    sys.stderr.flush()


def printable(text: str) -> str:
    """`text` with every unprintable character written as its Python escape (a newline as \\n)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def interactive() -> bool:
    """Whether a person can answer a question: stdin is a terminal (not a pipe, a file or CI)."""
    return sys.stdin.isatty()


def confirm(question: str) -> bool:
    """Ask a yes/no question on stderr and read the answer from stdin; no (or end of input) is the default.

    Not click's prompt: it writes the last space of the prompt to stdout, which must stay for data.
    """
    sys.stderr.write(f"{question} [y/N]: ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def print_json(data: Any) -> None:
    sys.stdout.write(strict_json.dumps(data, indent=2, sort_keys=False) + "\n")  # NaN is null: jq reads it
    sys.stdout.flush()
