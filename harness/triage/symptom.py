"""How a crash state fails: its verdict and the oracle's findings, each a rule and a file.

Two states *fail the same way* when their verdicts are equal and, if the original's
oracle named files, they share at least one (rule, file) finding. Sharing one rather
than all is deliberate: a state that loses three fsync'd files may owe each loss to a
different write, and the smallest report is the one that keeps one of those losses by
the same rule -- the report lists which of the original's findings it keeps.

The findings are read from the guest check's note, the oracle's verdict as JSON
(``check.guest.judge``), which is cut at 1500 characters: it is scanned with patterns
that still find every complete item of a cut one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.check.host import CheckResult
from harness.outcome import Outcome, reduce

# The oracle's rule for each kind of finding (harness/model/oracle/'s numbering).
RULES = {
    "missing": "rule 1: a durable name is missing",
    "missing_dir": "rule 9: a durable directory is missing",
    "expected": "rule 1: durable content differs",
    "error": "rule 1: durable content unreadable",
    "prefix": "rule 4: an appended file lost its durable prefix",
    "either": "rule 5: rename-over left neither old nor new",
    "present": "rule 6: a durably removed name is back",
    "nlink": "rule 7: link count differs",
    "xattrs": "rule 8: extended attributes differ",
    "stamp": "rule 20: a time out of its window",
}
_LIST = re.compile(r'"(missing|present)": \[([^\]]*)')
_ITEM = re.compile(r'"((?:[^"\\]|\\.)*)"')
_OBJECT = re.compile(r'\{"path": "((?:[^"\\]|\\.)*)", "(\w+)"')

Finding = tuple[str, str]  # (rule, path)


@dataclass(frozen=True)
class Symptom:
    outcome: Outcome
    findings: frozenset[Finding] = frozenset()
    detail: str = ""  # the checks in one line: host/e2fsck: repaired, guest/...: data_loss
    decided_on_host: bool = False  # the guest was not asked: the host said enough
    note: str = ""  # the oracle's verdict as the guest check gave it (JSON, maybe cut)

    @property
    def rules(self) -> list[str]:
        return sorted({r for r, _ in self.findings})

    def same_way(self, original: Symptom) -> bool:
        """Equal verdicts sharing a finding -- one of the original's losses of a name
        or bytes when it has any: a lost time alone (rule 20), which almost any workload
        can show on the root, keeps a triage only when times were all it lost."""
        if self.outcome != original.outcome:
            return False
        lost = {f for f in original.findings if f[0] != RULES["stamp"]}
        return not original.findings or bool(self.findings & (lost or original.findings))

    def text(self) -> str:
        found = "; ".join(f"{r}: {p}" for r, p in sorted(self.findings))
        return f"{self.outcome}" + (f" ({found})" if found else "")


def findings(note: str) -> frozenset[Finding]:
    """The (rule, path) findings of an oracle note, complete items only."""
    out: set[Finding] = set()
    for key, items in _LIST.findall(note):
        for path in _ITEM.findall(items):
            rule = "missing_dir" if key == "missing" and path.endswith("/") else key
            out.add((RULES[rule], path.rstrip("/") or "/"))
    for path, key in _OBJECT.findall(note):
        out.add((RULES.get(key, f"oracle: {key}"), path))
    if note.startswith('{"error"'):
        out.add((RULES["error"], "(the tree)"))
    return frozenset(out)


def of(results: Sequence[CheckResult], *, decided_on_host: bool = False) -> Symptom:
    """The symptom of one state's checks (host and guest)."""
    notes = [r.note for r in results if r.stage == "guest" and r.outcome is Outcome.DATA_LOSS]
    found = frozenset(f for n in notes for f in findings(n))
    detail = ", ".join(f"{r.stage}/{r.checker}: {r.outcome}" for r in results)
    outcome = reduce(r.outcome for r in results)
    return Symptom(outcome, found, detail, decided_on_host, "\n".join(notes))


@dataclass
class Tally:
    """What a triage asked of the checkers."""

    host: int = 0
    guest: int = 0
    guest_boots: int = 0
    same_image: int = 0  # candidates whose image was judged before (content identity)
    # Candidates the lab could not judge (a hang, a panic, its own error): taken as not
    # failing the same way, so ddmin may keep more writes than it would have.
    harness: int = 0
