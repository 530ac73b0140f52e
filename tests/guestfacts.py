"""checkstate.py's facts for the judging tests, written as the tests think of them: a
command as ``{"rc": .., "output": ..}`` and a clean mount, umount and fsck by default."""

from __future__ import annotations

from typing import Any

from harness.model.contract import CheckFacts, Command


def command(rc: int = 0, output: str = "", seconds: float = 0.1) -> Command:
    return Command(argv=["cmd"], rc=rc, seconds=seconds, output=output)


def facts(**parts: Any) -> CheckFacts:
    """A clean state's facts, ``parts`` over them (a dict with ``rc``: a command)."""
    given = {k: command(**v) if isinstance(v, dict) and "rc" in v else v for k, v in parts.items()}
    return CheckFacts(**{"mount": command(), "umount": command(), "fsck": command(), **given})
