"""The oracle's rules as data: each with its number, the promise it belongs to, what a
state that breaks it lost, and where the promise is written down.

The numbers are the oracle package's docstring's and docs/verdicts.md's; a verdict
(``contract.Verdict``; ``broken``) names the rule its first failed requirement broke. A new rule is
a row here, its check (``verify.py``) and a row in docs/verdicts.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..contract import Verdict


@dataclass(frozen=True)
class Rule:
    name: str
    number: int
    promise: str  # the group: data, names, metadata, ordering, handles, content
    words: str
    source: str

    def text(self) -> str:
        return f"rule {self.number}: {self.words}" if self.number else self.words


_R = Rule
TABLE: tuple[Rule, ...] = (
    _R("file-missing", 1, "names", "a durable name must exist (rule 10: a new file, empty)",
       "POSIX fsync(2) and a directory's fsync; ext4/xfs/btrfs persist the fsync'd name"),
    _R("dir-missing", 9, "names", "a durable directory must exist",
       "fsync(2) of the parent directory, or sync(2)"),
    _R("content", 1, "data", "fsync'd content must be there, size and sha256",
       "POSIX fsync(2), fdatasync(2)"),
    _R("xattrs", 8, "metadata", "user. attributes as fsync or sync left them",
       "fsync(2) commits the whole inode (ext4, xfs, btrfs); xattr(7)"),
    _R("append-prefix", 4, "data", "an appended file keeps its durable prefix",
       "write(2): an append never changes bytes before the old end"),
    _R("rename-atomic", 5, "names", "rename-over leaves the old or the new content",
       "POSIX rename(2): the target is replaced atomically"),
    _R("unreadable", 1, "data", "a required file must be readable",
       "POSIX fsync(2): durable data is data that can be read back"),
    _R("removal-undone", 6, "names", "a durably removed name stays gone (rule 15: an fsync'd"
       " unlinked-but-open file)", "unlink(2) + directory fsync; fstests generic/764, /792"),
    _R("nlink", 7, "metadata", "link counts exact after a sync",
       "sync(2) writes the whole inode; stat(2) st_nlink"),
    _R("data-loss", 0, "data", "the oracle's requirements (docs/verdicts.md)",
       "docs/verdicts.md"),
)  # fmt: skip
RULES: dict[str, Rule] = {r.name: r for r in TABLE}

# A mismatch's key -> the rule it broke (the first key present wins; else content).
MISMATCH_RULES = (
    ("xattrs", "xattrs"),
    ("prefix", "append-prefix"),
    ("either", "rename-atomic"),
    ("error", "unreadable"),
)


def broken(v: Verdict) -> tuple[Rule, str | None]:
    """The rule the verdict's first failed requirement broke, and the name it broke it
    on: read from the typed verdict where it is made, never from stored text."""
    if v.missing:
        path = v.missing[0]
        return RULES["dir-missing" if path.endswith("/") else "file-missing"], path.rstrip("/")
    for m in v.mismatched[:1]:
        name = next((r for key, r in MISMATCH_RULES if getattr(m, key) is not None), "")
        return RULES[name or "content"], m.path
    if v.present:
        return RULES["removal-undone"], v.present[0]
    if v.nlink:
        return RULES["nlink"], v.nlink[0].path
    return RULES["data-loss"], None
