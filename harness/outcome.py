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

from collections.abc import Iterable
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
