"""What a check, a crash state or a whole run came to: one enum, one severity order, and
the one place that decides what counts as a finding, what is expected, what is the lab's,
and every exit status of the command line (``counts_as``, ``status``; the store keeps
the classification as ``outcome_classes``, and tests/test_outcome_rules.py fails on a copy
of the sets anywhere else).

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

# Every exit status of the command line, decided here and nowhere else (the exceptions of
# harness/errors.py carry these; harness/cli returns them).
EXIT_OK = 0
EXIT_FINDING = 1  # a finding (or a known-answer control's wrong answer)
EXIT_INPUT = 2  # bad input: a scenario, option, file or value the user can fix
EXIT_HARNESS = 3  # the lab could not do its job; says nothing about the filesystem
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM, as a shell reports SIGINT


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

FINDINGS: frozenset[Outcome] = frozenset(
    {Outcome.REPAIRED, Outcome.UNREPAIRABLE, Outcome.MOUNT_FAILED, Outcome.DATA_LOSS}
)
HARNESS: frozenset[Outcome] = frozenset({Outcome.HARNESS_ERROR, Outcome.TIMEOUT, Outcome.PANIC})


def by_severity(outcomes: Iterable[Outcome] = _ORDER) -> list[Outcome]:
    """``outcomes`` (every one by default), least severe first."""
    return sorted(outcomes, key=_SEVERITY.__getitem__)


class Counted(StrEnum):
    """How one item's outcome counts in a run's account: the stored classification
    (``outcome_classes`` in the store, written from ``classes()``) that SQL views and the
    dashboard read instead of restating which outcomes are findings."""

    FINDING = "finding"
    EXPECTED = "expected"  # a would-be finding (or any outcome) the kind's rule expects
    HARNESS = "harness"  # the lab could not tell, expected or not
    CLEAN = "clean"
    SKIPPED = "skipped"


def counts_as(o: Outcome, expected: bool = False) -> Counted:
    """The one rule of the account. A harness outcome is the lab's whatever the item
    modelled (a hang is never expected away); an outcome the kind's rule expects is
    reported but no finding; else a finding is a finding."""
    if o in HARNESS:
        return Counted.HARNESS
    if expected:
        return Counted.EXPECTED
    if o in FINDINGS:
        return Counted.FINDING
    return Counted.SKIPPED if o is Outcome.SKIPPED else Counted.CLEAN


def classes() -> list[tuple[str, int, int, str]]:
    """Every (outcome, expected, severity, counted as) row of the store's
    ``outcome_classes`` table: ``counts_as`` for every outcome, expected or not."""
    return [
        (str(o), int(e), o.severity, str(counts_as(o, e))) for o in _ORDER for e in (False, True)
    ]


def expected_without_journal(o: Outcome, journaled: bool) -> bool:
    """The crash kinds' counting rule: a filesystem without a journal recovers by a full
    fsck, so its ``repaired`` is the design, reported but no finding."""
    return o is Outcome.REPAIRED and not journaled


def is_finding(o: Outcome) -> bool:
    """True for outcomes that say something is wrong with the filesystem under test."""
    return o in FINDINGS


def is_harness(o: Outcome) -> bool:
    """True for outcomes that say the lab could not tell (never a filesystem finding)."""
    return o in HARNESS


def reduce(outcomes: Iterable[Outcome]) -> Outcome:
    """The worst outcome; ``skipped`` for none, since no check means no evidence."""
    return max(outcomes, key=_SEVERITY.__getitem__, default=Outcome.SKIPPED)


def status(*, finding: bool = False, harness: bool = False) -> int:
    """The precedence every exit status follows: 1 for a finding, whatever else happened;
    3 for no finding but something the lab could not do; else 0.

    Findings take precedence because a finding is definite and is what a caller acts
    on; 3 is reserved for "no finding, but do not read that as clean", so a person
    never confuses a broken lab with a clean filesystem. Whether a run that found
    something also had harness trouble is in its summary (``scenario results show``).
    A run's own status is its account's (``Account.status``)."""
    if finding:
        return EXIT_FINDING
    if harness:
        return EXIT_HARNESS
    return EXIT_OK


def unfinished_status(account: Account) -> int:
    """A run that did not finish exits 3 unless it found something: the findings it had
    stay a finding, never hidden behind the failure that came after."""
    return status(finding=account.status == EXIT_FINDING, harness=True)


def campaign_status(run_statuses: Iterable[int], *, quarantined: bool) -> int:
    """A campaign's exit status from its runs' stored ones: a finding anywhere (a
    control's wrong answer included) is 1, whatever else happened; then 3 for a run or
    an element the lab could not finish; else 0."""
    seen = set(run_statuses)
    return status(finding=EXIT_FINDING in seen, harness=EXIT_HARNESS in seen or quarantined)


def input_status(bad: bool) -> int:
    """2 when some input could not be used (the rest still reported), else 0."""
    return EXIT_INPUT if bad else EXIT_OK


@dataclass(frozen=True)
class Tallied:
    """One item's outcome as the run's account sees it: ``expected`` when the kind's
    one counting rule says the filesystem's design makes it normal (``repaired`` without
    a journal, ``data_loss`` past a pool's parity, any outcome of a modelled lying disk),
    so it is reported but is no finding. ``waiver``: the configuration option that gave
    up the promise the outcome breaks (harness/waivers.py), which also makes it expected."""

    item: str
    outcome: Outcome
    expected: bool = False
    waiver: str | None = None


@dataclass(frozen=True)
class Account:
    """Every outcome of one run, the same for every experiment kind: what ``results
    show``, ``results runs``, campaigns and the controls read.

    ``counts`` are the outcomes that can be findings; ``expected`` the ones the kind's
    rule marked expected, and ``expected_items`` which items those are (stored, so a
    view can tell an expected state from a finding); ``waived`` those a configuration's
    waiver made expected, with the waiver's name. ``expect`` is a known-answer control's
    answer ("findings" or "clean"); ``control_failed`` says in words how it went wrong.
    """

    counts: Mapping[str, int] = field(default_factory=dict)
    expected: Mapping[str, int] = field(default_factory=dict)
    expect: str | None = None
    expected_items: frozenset[str] = field(default_factory=frozenset)
    waived: Mapping[str, str] = field(default_factory=dict)

    @property
    def findings(self) -> int:
        return self._counted(Counted.FINDING)

    @property
    def harness(self) -> int:
        """Items the lab could not check, expected ones included: a hang is the lab's
        whatever the item modelled."""
        return self._counted(Counted.HARNESS)

    def _counted(self, what: Counted) -> int:
        both = ((self.counts, False), (self.expected, True))
        return sum(n for d, e in both for o, n in d.items() if counts_as(Outcome(o), e) is what)

    @property
    def control_failed(self) -> str | None:
        """For a known-answer control: what went wrong, or None when the answer is right
        (or the run expects nothing). Without a finding, a run with harness outcomes gave
        no answer at all: that is exit 3, not a wrong answer. A finding the configuration
        waived answers a control that expects findings (barrier=0 must lose data: a check
        of the lab, not a report on the kernel)."""
        if self.expect == "findings" and not (self.findings or self.waived or self.harness):
            return "control failed: expected findings, got none"
        if self.expect == "clean" and self.findings:
            return f"control failed: expected clean, got {self.findings} finding(s)"
        return None

    @property
    def status(self) -> int:
        """The run's exit status: 1 a finding (or a control's wrong answer), 3 no finding
        but something could not be checked, 0 otherwise; a control that found what it
        must exits 0."""
        wrong = bool(self.control_failed)
        found = bool(self.findings) and self.expect != "findings"
        return status(finding=wrong or found, harness=bool(self.harness) and not self.findings)

    def to_json(self) -> dict[str, object]:
        return {
            "counts": dict(self.counts),
            "expected": dict(self.expected),
            "findings": self.findings,
            "harness": self.harness,
            "expect": self.expect,
            **({"waived": len(self.waived)} if self.waived else {}),
            "control_failed": self.control_failed,
            "status": self.status,
        }


def tally(items: Iterable[Tallied], expect: str | None = None) -> Account:
    """The account of a run's items, most severe outcome last in each mapping."""
    counts: dict[str, int] = {}
    expected: dict[str, int] = {}
    expected_items: set[str] = set()
    waived: dict[str, str] = {}
    for t in items:
        into = expected if t.expected or t.waiver else counts
        into[str(t.outcome)] = into.get(str(t.outcome), 0) + 1
        if t.expected or t.waiver:
            expected_items.add(t.item)
        if t.waiver:
            waived[t.item] = t.waiver

    def ordered(d: dict[str, int]) -> dict[str, int]:
        return {o: d[o] for o in sorted(d, key=lambda o: Outcome(o).severity)}

    return Account(ordered(counts), ordered(expected), expect, frozenset(expected_items), waived)
