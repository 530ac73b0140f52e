"""The terminal side of long commands: one progress view, on stderr, for every runner."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

ProgressFn = Callable[[str, int, int], None]  # (what is happening, done, total or 0)

# Piped into a file or a CI log, rich assumes 80 columns: tables shrink their cells to
# `ext2-fsy…` and a nightly log no longer says which element found what. Wide enough
# that a table keeps its natural width (a table is never padded past its content).
PIPE_WIDTH = 1000


def console(*, stderr: bool = False) -> Console:
    """The lab's console: never folds a line it prints (soft_wrap: a command printed for
    copy-paste must paste whole, in a terminal or a pipe), never colours numbers inside
    ids, and piped, as wide as a table needs. ``COLUMNS`` still wins."""
    out = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = PIPE_WIDTH
    return out


@contextmanager
def progress(name: str) -> Iterator[ProgressFn]:
    """A transient progress line for ``name``; yields the callback runners report to."""
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),  # names and items are user text
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(name, total=None)

        def update(what: str, done: int, total: int) -> None:
            bar.update(task, description=f"{name}: {what}", completed=done, total=total or None)

        yield update
