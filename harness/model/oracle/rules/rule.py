"""A rule of the oracle, and what a check of one state has found so far."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ...contract import Mismatch, NlinkMiss


@dataclass(frozen=True)
class Rule:
    name: str
    number: int
    promise: str  # the group: data, names, metadata, times, ordering, handles, content
    words: str
    source: str

    def text(self) -> str:
        return f"rule {self.number}: {self.words}" if self.number else self.words


@dataclass
class Found:
    """What ``verify`` found under ``root`` so far, requirement by requirement.
    ``until``: the guest's clock when the state's interval closed (rule 20's bound)."""

    root: str
    until: int | None = None
    missing: list[str] = field(default_factory=list)
    mismatched: list[Mismatch] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    nlink: list[NlinkMiss] = field(default_factory=list)
    checked: int = 0

    def full(self, path: str) -> str:
        return os.path.join(self.root, path)

    def failed(self) -> set[str]:
        return {
            *self.missing,
            *self.present,
            *(m.path for m in self.mismatched),
            *(n.path for n in self.nlink),
        }
