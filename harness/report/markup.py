"""User text in rich output. Our messages are rich markup (``[bold red]error:[/]``), so a
path, a value, a scenario name or a line of guest output put into one must be escaped:
``[bold]`` in a file name would style the rest of the line, and ``[/x]`` would end the
command in a ``MarkupError`` traceback. Every such value goes through ``esc``; text with no
styling of ours is printed with ``markup=False`` instead.
"""

from __future__ import annotations

from rich.markup import escape


def esc(value: object) -> str:
    """``value`` as markup that prints exactly ``str(value)``."""
    return escape(str(value))


def cells(*values: object) -> list[str]:
    """Table cells that print verbatim (rich reads a ``str`` cell as markup)."""
    return [esc(v) for v in values]
