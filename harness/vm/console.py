"""Reading the guest's serial console: is this a panic, an oops, or a normal log?"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class Trouble(StrEnum):
    PANIC = "panic"
    OOPS = "oops"


_PATTERNS: list[tuple[Trouble, re.Pattern[str]]] = [
    (Trouble.PANIC, re.compile(r"Kernel panic - not syncing")),
    (
        Trouble.OOPS,
        re.compile(r"(Oops: |BUG: |general protection fault|kernel BUG at|Call Trace:)"),
    ),
]


@dataclass(frozen=True)
class Finding:
    trouble: Trouble
    line: str


def scan(text: str) -> Finding | None:
    """The worst trouble in ``text``: a panic beats an oops."""
    found: Finding | None = None
    for line in text.splitlines():
        for trouble, pattern in _PATTERNS:
            if pattern.search(line):
                if trouble is Trouble.PANIC:
                    return Finding(trouble, line.strip())
                found = found or Finding(trouble, line.strip())
    return found


def tail(path: Path, lines: int = 40) -> str:
    try:
        data = path.read_bytes()[-64 * 1024 :]
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


class Reader:
    """Reads a growing console log in whole lines, each line once."""

    def __init__(self, path: Path):
        self.path = path
        self.seen = 0

    def unseen(self, *, final: bool = False) -> str:
        """The whole lines written since the last call; a line still being printed
        (slowly, under TCG) waits for the next call, unless ``final`` (the VM is gone,
        nothing more will come)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.seen)
                new = f.read()
        except FileNotFoundError:
            return ""
        if not final:
            new = new[: new.rfind(b"\n") + 1]
        self.seen += len(new)
        return new.decode(errors="replace")
