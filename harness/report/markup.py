"""User text in rich output. Our messages are rich markup (``[bold red]error:[/]``), so a
path, a value, a scenario name or a line of guest output put into one must be escaped:
``[bold]`` in a file name would style the rest of the line, and ``[/x]`` would end the
command in a ``MarkupError`` traceback. Every such value goes through ``esc``; text with no
styling of ours is printed with ``markup=False`` instead.
"""

from __future__ import annotations

import io
import os
import re
import sys
from typing import TextIO, cast

from rich.console import Console
from rich.markup import escape


def esc(value: object) -> str:
    """``value`` as markup that prints exactly ``str(value)``."""
    return escape(str(value))


def cells(*values: object) -> list[str]:
    """Table cells that print verbatim (rich reads a ``str`` cell as markup)."""
    return [esc(v) for v in values]


# Piped into a file or a CI log, rich assumes 80 columns: tables shrink their cells to
# `ext2-fsy…` and a nightly log no longer says which element found what. Wide enough
# that a table keeps its natural width (a table is never padded past its content).
PIPE_WIDTH = 1000


class _Unpadded(io.TextIOBase):
    """Standard output or error, written without the spaces that end a line: a table
    pads each cell to its column's widest, and one 500-character line (the tools a run
    used) made every line of a piped ``results show`` as long. Looked up at each write,
    as rich does, so a test's captured stream is the one written."""

    def __init__(self, stderr: bool) -> None:
        self.stderr = stderr

    def _stream(self) -> TextIO:
        return sys.stderr if self.stderr else sys.stdout

    def write(self, s: str) -> int:
        self._stream().write(_LINE_END.sub("\n", s))
        return len(s)

    def flush(self) -> None:
        self._stream().flush()

    def isatty(self) -> bool:
        return self._stream().isatty()


_LINE_END = re.compile(r"[ \t]+\n")


def console(*, stderr: bool = False, piped: int = PIPE_WIDTH) -> Console:
    """The lab's console: never folds a line it prints (soft_wrap: a command printed for
    copy-paste must paste whole, in a terminal or a pipe), never colours numbers inside
    ids, and piped, ``piped`` columns wide (by default as wide as a table needs) and
    without the padding after each line's last character. ``COLUMNS`` still wins."""
    out = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not out.is_terminal:
        pipe = cast(TextIO, _Unpadded(stderr))  # a text stream: write, flush, isatty
        out = Console(file=pipe, highlight=False, soft_wrap=True)
        if "COLUMNS" not in os.environ:
            out.width = piped
    return out
