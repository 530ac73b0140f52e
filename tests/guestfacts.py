"""checkstate.py's facts for the judging tests, written as the tests think of them: a
command as ``{"rc": .., "output": ..}``, a verdict as a dict, and a clean mount, umount
and fsck by default."""

from __future__ import annotations

from typing import Any

from harness.model.contract import CheckFacts, Command, Verdict


def command(rc: int = 0, output: str = "", seconds: float = 0.1) -> Command:
    return Command(argv=["cmd"], rc=rc, seconds=seconds, output=output)


def verdict(**said: Any) -> Verdict:
    """The oracle's verdict with only what a test says of it (a state at no mark, one
    requirement checked, by default)."""
    return Verdict.from_dict({"mark": None, "exact": False, "known": True, "checked": 1, **said})


def facts(**parts: Any) -> CheckFacts:
    """A clean state's facts, ``parts`` over them (a dict with ``rc``: a command; ``verify``
    as a dict: the verdict's keys a test sets)."""
    given = {k: command(**v) if isinstance(v, dict) and "rc" in v else v for k, v in parts.items()}
    if isinstance(given.get("verify"), dict):
        given["verify"] = verdict(**given["verify"])
    return CheckFacts(**{"mount": command(), "umount": command(), "fsck": command(), **given})
