"""The terminal side of long commands: one progress view, on stderr, for every runner."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from harness.report.markup import console

ProgressFn = Callable[[str, int, int], None]  # (what is happening, done, total or 0)
__all__ = ["ProgressFn", "console", "progress"]


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
