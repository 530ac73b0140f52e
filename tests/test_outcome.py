from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from harness.errors import EXIT_FINDING, EXIT_HARNESS, EXIT_OK
from harness.outcome import Outcome, Tallied, is_finding, is_harness, reduce, tally

outcomes = st.lists(st.sampled_from(list(Outcome)))


def exit_status(xs: list[Outcome]) -> int:
    """A run's exit status from its items' verdicts, none expected: its account's."""
    return tally(Tallied(str(i), o) for i, o in enumerate(xs)).status


def test_filesystem_findings_are_ordered_by_severity() -> None:
    chain = [
        Outcome.CONSISTENT,
        Outcome.REPAIRED,
        Outcome.UNREPAIRABLE,
        Outcome.MOUNT_FAILED,
        Outcome.DATA_LOSS,
    ]
    assert [o.severity for o in chain] == sorted(o.severity for o in chain)
    assert reduce(chain) is Outcome.DATA_LOSS
    assert reduce(reversed(chain)) is Outcome.DATA_LOSS


def test_findings_and_harness_outcomes_partition_the_rest() -> None:
    findings = {o for o in Outcome if is_finding(o)}
    harness = {o for o in Outcome if is_harness(o)}
    assert findings == {
        Outcome.REPAIRED,
        Outcome.UNREPAIRABLE,
        Outcome.MOUNT_FAILED,
        Outcome.DATA_LOSS,
    }
    assert harness == {Outcome.TIMEOUT, Outcome.PANIC, Outcome.HARNESS_ERROR}
    assert not findings & harness
    assert set(Outcome) - findings - harness == {Outcome.CONSISTENT, Outcome.SKIPPED}


def test_a_hang_is_never_reported_clean_but_never_hides_a_finding() -> None:
    assert reduce([Outcome.CONSISTENT, Outcome.TIMEOUT]) is Outcome.TIMEOUT
    assert reduce([Outcome.PANIC, Outcome.REPAIRED]) is Outcome.REPAIRED
    assert reduce([Outcome.HARNESS_ERROR, Outcome.TIMEOUT, Outcome.PANIC]) is Outcome.PANIC


def test_no_checks_is_no_evidence() -> None:
    assert reduce([]) is Outcome.SKIPPED
    assert reduce([Outcome.SKIPPED, Outcome.CONSISTENT]) is Outcome.CONSISTENT


def test_values_are_the_stored_strings() -> None:
    assert Outcome("data_loss") is Outcome.DATA_LOSS
    assert str(Outcome.MOUNT_FAILED) == "mount_failed"


@given(outcomes)
def test_reduce_is_the_maximum_by_severity(xs: list[Outcome]) -> None:
    r = reduce(xs)
    assert all(r.severity >= x.severity for x in xs)
    assert r in xs or (not xs and r is Outcome.SKIPPED)


@given(outcomes, outcomes)
def test_reduce_composes(xs: list[Outcome], ys: list[Outcome]) -> None:
    assert reduce(xs + ys) is reduce([reduce(xs), reduce(ys)])


def test_exit_status() -> None:
    assert exit_status([]) == EXIT_OK
    assert exit_status([Outcome.CONSISTENT, Outcome.SKIPPED]) == EXIT_OK
    assert exit_status([Outcome.CONSISTENT, Outcome.TIMEOUT]) == EXIT_HARNESS
    assert exit_status([Outcome.REPAIRED, Outcome.CONSISTENT]) == EXIT_FINDING
    # A finding is definite; harness trouble elsewhere does not mask it.
    assert exit_status([Outcome.PANIC, Outcome.DATA_LOSS]) == EXIT_FINDING


@given(outcomes)
def test_exit_status_agrees_with_classification(xs: list[Outcome]) -> None:
    status = exit_status(xs)
    if any(is_finding(x) for x in xs):
        assert status == EXIT_FINDING
    elif any(is_harness(x) for x in xs):
        assert status == EXIT_HARNESS
    else:
        assert status == EXIT_OK
