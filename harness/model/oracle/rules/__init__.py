"""The oracle's rules, grouped by the promise they check: one module per promise, each
rule a row with its number, what a state that breaks it lost and where the promise is
written down, beside the check that holds a mounted state to it.

- ``names``: rules 1 (a name), 5, 6, 9, 10 -- which names a crash keeps or drops;
- ``data``: rules 1 (the bytes), 4 -- what fsync, fdatasync and sync promise of content;
- ``metadata``: rules 7, 8, 13, 14 -- what a whole-inode commit keeps beside the bytes;
- ``times``: rule 20 -- mtime and ctime.

The numbers are the oracle package's docstring's and docs/verdicts.md's; a verdict
(``contract.Verdict``; ``broken``) names the rule its first failed requirement broke. A
new rule is a module here (its rows and its check), its place in ``INODE_CHECKS`` or
``verify.py``'s walk, and a row in docs/verdicts.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ...contract import Verdict
from . import data, metadata, names, times
from .rule import Found, Rule

TABLE: tuple[Rule, ...] = (
    *names.RULES,
    *data.RULES,
    *metadata.RULES,
    *times.RULES,
    Rule("data-loss", 0, "data", "the oracle's requirements (docs/verdicts.md)",
         "docs/verdicts.md"),
)  # fmt: skip
RULES: dict[str, Rule] = {r.name: r for r in TABLE}

# What a whole file must hold beside its bytes, in the order checked: the first that
# fails is the file's finding (one finding a file, as a reader of the verdict expects).
InodeCheck = Callable[[Found, str, os.stat_result, dict[str, Any]], bool]
INODE_CHECKS: tuple[InodeCheck, ...] = (
    metadata.nlink,
    metadata.xattrs,
    metadata.mode_owner,
    times.stamps,
)

# A mismatch's key -> the rule it broke (the first key present wins; else content).
MISMATCH_RULES = (
    ("xattrs", "xattrs"),
    ("prefix", "append-prefix"),
    ("either", "rename-atomic"),
    ("error", "unreadable"),
    ("metadata", "mode-owner"),
    ("symlink", "symlink"),
    ("stamp", "times"),
)


def broken(v: Verdict) -> tuple[Rule, str | None]:
    """The rule the verdict's first failed requirement broke, and the name it broke it
    on: read from the typed verdict where it is made, never from stored text. A lost
    time (rule 20) names the finding only when nothing else was lost: a state that lost a
    file's bytes and its directory's mtime lost the bytes."""
    if v.missing:
        path = v.missing[0]
        return RULES["dir-missing" if path.endswith("/") else "file-missing"], path.rstrip("/")
    for m in [m for m in v.mismatched if m.stamp is None][:1]:
        name = next((r for key, r in MISMATCH_RULES if getattr(m, key) is not None), "")
        return RULES[name or "content"], m.path
    if v.present:
        return RULES["removal-undone"], v.present[0]
    if v.nlink:
        return RULES["nlink"], v.nlink[0].path
    for m in v.mismatched[:1]:
        return RULES["times"], m.path
    return RULES["data-loss"], None


__all__ = ["INODE_CHECKS", "RULES", "TABLE", "Found", "Rule", "broken", "data", "metadata",
           "names", "times"]  # fmt: skip
