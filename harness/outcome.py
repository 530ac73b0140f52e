"""What a check, a crash state or a whole run came to: one enum, one severity order.

Two kinds of outcome share the enum but never mix in the counts:

* **findings** say something about the filesystem under test;
* **harness outcomes** say only that the lab could not tell (a hang, a guest panic, a
  broken tool). They are never counted as findings, and never as "consistent" either.

``skipped`` is neither: the check was not run (a missing prerequisite, fstests'
"not run"), which is not evidence of anything.

Severity, least to worst (``reduce()`` picks the worst, like tmt's results)::

    skipped < consistent < harness_error < timeout < panic
            < repaired < unrepairable < mount_failed < data_loss

Why this order:

* A harness outcome outranks ``consistent``/``skipped``: a state where one check hung
  must not be reported clean, because the check that hung might have found something.
* A finding outranks every harness outcome: a finding is evidence that stands on its own,
  whereas a hang elsewhere only means less coverage. The individual checks keep the
  harness outcome, so nothing is hidden, it just does not decide the verdict.
* Among harness outcomes ``panic`` is the most telling (a kernel that panics on mounting
  a crash image may itself be the bug worth a look), then ``timeout`` (a hang, same
  suspicion but weaker), then ``harness_error`` (only the lab broke).
* Among findings: ``repaired`` means fsck had to fix something the journal should have
  made unnecessary, but the result is usable; ``unrepairable`` leaves an image fsck
  cannot fix; ``mount_failed`` means the kernel refuses the image, so no data is
  reachable without expert help; ``data_loss`` is worst because it is *silent*: the
  filesystem mounts and looks fine, yet a file the workload fsync'd is missing or
  different, which breaks the durability promise applications rely on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from harness.errors import EXIT_FINDING, EXIT_HARNESS, EXIT_OK


class Outcome(StrEnum):
    SKIPPED = "skipped"
    CONSISTENT = "consistent"
    HARNESS_ERROR = "harness_error"
    TIMEOUT = "timeout"
    PANIC = "panic"
    REPAIRED = "repaired"
    UNREPAIRABLE = "unrepairable"
    MOUNT_FAILED = "mount_failed"
    DATA_LOSS = "data_loss"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


# Declaration order *is* the severity order; spelled out so a reordering of the class
# body cannot silently change verdicts.
_ORDER = (
    Outcome.SKIPPED,
    Outcome.CONSISTENT,
    Outcome.HARNESS_ERROR,
    Outcome.TIMEOUT,
    Outcome.PANIC,
    Outcome.REPAIRED,
    Outcome.UNREPAIRABLE,
    Outcome.MOUNT_FAILED,
    Outcome.DATA_LOSS,
)
_SEVERITY = {o: i for i, o in enumerate(_ORDER)}

# Each outcome's colour in the charts (the PNGs of `results plot`, the dashboard of
# `results serve`), in severity order.
COLOURS: dict[str, str] = {
    Outcome.SKIPPED: "#bbbbbb",
    Outcome.CONSISTENT: "#2ca02c",
    Outcome.HARNESS_ERROR: "#ffbf00",
    Outcome.TIMEOUT: "#ff7f0e",
    Outcome.PANIC: "#8c564b",
    Outcome.REPAIRED: "#1f77b4",
    Outcome.UNREPAIRABLE: "#9467bd",
    Outcome.MOUNT_FAILED: "#e377c2",
    Outcome.DATA_LOSS: "#d62728",
}

FINDINGS = frozenset(
    {Outcome.REPAIRED, Outcome.UNREPAIRABLE, Outcome.MOUNT_FAILED, Outcome.DATA_LOSS}
)
HARNESS = frozenset({Outcome.HARNESS_ERROR, Outcome.TIMEOUT, Outcome.PANIC})


def is_finding(o: Outcome) -> bool:
    """True for outcomes that say something is wrong with the filesystem under test."""
    return o in FINDINGS


def is_harness(o: Outcome) -> bool:
    """True for outcomes that say the lab could not tell (never a filesystem finding)."""
    return o in HARNESS


def reduce(outcomes: Iterable[Outcome]) -> Outcome:
    """The worst outcome; ``skipped`` for none, since no check means no evidence."""
    return max(outcomes, key=_SEVERITY.__getitem__, default=Outcome.SKIPPED)


def exit_status(outcomes: Iterable[Outcome]) -> int:
    """Exit status of a run from its state verdicts.

    0: no finding and no harness outcome (``skipped`` states do not fail a run);
    1: at least one finding, whatever else happened;
    3: no finding, but at least one state the lab could not check.

    Findings take precedence because a finding is definite and is what a caller acts
    on; 3 is reserved for "no finding, but do not read that as clean", so a person
    never confuses a broken lab with a clean filesystem. Whether a run that found
    something also had harness trouble is in its summary (``scenario results show``).
    """
    seen = set(outcomes)
    if seen & FINDINGS:
        return EXIT_FINDING
    if seen & HARNESS:
        return EXIT_HARNESS
    return EXIT_OK


@dataclass(frozen=True)
class Tallied:
    """One item's outcome as the run's account sees it: ``expected`` when the kind's
    one counting rule says the filesystem's design makes it normal (``repaired`` without
    a journal, ``data_loss`` past a pool's parity, any outcome of a modelled lying disk),
    so it is reported but is no finding."""

    item: str
    outcome: Outcome
    expected: bool = False


@dataclass(frozen=True)
class Account:
    """Every outcome of one run, the same for every experiment kind: what ``results
    show``, ``results runs``, campaigns and the controls read.

    ``counts`` are the outcomes that can be findings; ``expected`` the ones the kind's
    rule marked expected. ``expect`` is a known-answer control's answer ("findings" or
    "clean"); ``control_failed`` says in words how it went wrong.
    """

    counts: Mapping[str, int] = field(default_factory=dict)
    expected: Mapping[str, int] = field(default_factory=dict)
    expect: str | None = None

    @property
    def findings(self) -> int:
        return sum(n for o, n in self.counts.items() if is_finding(Outcome(o)))

    @property
    def harness(self) -> int:
        """Items the lab could not check, expected ones included: a hang is the lab's
        whatever the item modelled."""
        both = (*self.counts.items(), *self.expected.items())
        return sum(n for o, n in both if is_harness(Outcome(o)))

    @property
    def control_failed(self) -> str | None:
        """For a known-answer control: what went wrong, or None when the answer is right
        (or the run expects nothing). Without a finding, a run with harness outcomes gave
        no answer at all: that is exit 3, not a wrong answer."""
        if self.expect == "findings" and not self.findings and not self.harness:
            return "control failed: expected findings, got none"
        if self.expect == "clean" and self.findings:
            return f"control failed: expected clean, got {self.findings} finding(s)"
        return None

    @property
    def status(self) -> int:
        """The run's exit status: 1 a finding (or a control's wrong answer), 3 no finding
        but something could not be checked, 0 otherwise; a control that found what it
        must exits 0."""
        if self.control_failed:
            return EXIT_FINDING
        if self.findings and self.expect != "findings":
            return EXIT_FINDING
        if self.harness and not self.findings:
            return EXIT_HARNESS
        return EXIT_OK

    def to_json(self) -> dict[str, object]:
        return {
            "counts": dict(self.counts),
            "expected": dict(self.expected),
            "findings": self.findings,
            "harness": self.harness,
            "expect": self.expect,
            "control_failed": self.control_failed,
            "status": self.status,
        }


def tally(items: Iterable[Tallied], expect: str | None = None) -> Account:
    """The account of a run's items, most severe outcome last in each mapping."""
    counts: dict[str, int] = {}
    expected: dict[str, int] = {}
    for t in items:
        into = expected if t.expected else counts
        into[str(t.outcome)] = into.get(str(t.outcome), 0) + 1

    def ordered(d: dict[str, int]) -> dict[str, int]:
        return {o: d[o] for o in sorted(d, key=lambda o: Outcome(o).severity)}

    return Account(ordered(counts), ordered(expected), expect)
