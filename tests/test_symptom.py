"""How a failing state fails (harness/triage/symptom.py): the oracle's note read into
(rule, file) findings, whole or cut, and what "the same way" means."""

from __future__ import annotations

import json

from harness.check.host import CheckResult
from harness.outcome import Outcome
from harness.triage import symptom
from harness.triage.symptom import RULES, Symptom


def guest(outcome: Outcome, note: str = "") -> CheckResult:
    return CheckResult("guest", "mount+verify", outcome, 0, 0.0, note, note=note)


def test_every_kind_of_oracle_finding_is_named_by_its_rule() -> None:
    note = json.dumps(
        {
            "mark": "crashlab:sync:3",
            "missing": ["f1", "d2/"],
            "mismatched": [
                {"path": "f3", "expected": "aa", "got": "bb", "size": 1, "expected_size": 2},
                {"path": "f4", "prefix": 10, "size": 4},
                {"path": "f5", "either": ["a", "b"], "got": "c"},
            ],
            "present": ["f6"],
            "nlink": [{"path": "f7", "nlink": 2, "expected": 1}],
        }
    )
    assert symptom.findings(note) == {
        (RULES["missing"], "f1"),
        (RULES["missing_dir"], "d2"),
        (RULES["expected"], "f3"),
        (RULES["prefix"], "f4"),
        (RULES["either"], "f5"),
        (RULES["present"], "f6"),
        (RULES["nlink"], "f7"),
    }
    # The guest cuts its note at 1500 characters: the complete items before the cut stay.
    cut = symptom.findings(note[: note.index('"f4"') + 2])
    assert cut == {
        (RULES["missing"], "f1"),
        (RULES["missing_dir"], "d2"),
        (RULES["expected"], "f3"),
    }


def test_the_same_way_is_the_verdict_and_one_shared_finding() -> None:
    lost = json.dumps({"missing": ["f1", "f2"]})
    original = symptom.of([guest(Outcome.DATA_LOSS, lost)])
    one = symptom.of([guest(Outcome.DATA_LOSS, json.dumps({"missing": ["f2"]}))])
    other = symptom.of([guest(Outcome.DATA_LOSS, json.dumps({"missing": ["f9"]}))])
    host_worse = symptom.of([CheckResult("host", "e2fsck", Outcome.UNREPAIRABLE, 4, 0.0)])
    assert one.same_way(original) and not other.same_way(original)
    assert not host_worse.same_way(original)
    assert not symptom.of([guest(Outcome.CONSISTENT)]).same_way(original)
    # Without oracle findings (fsck or mount judged it), the verdict alone decides.
    assert Symptom(Outcome.MOUNT_FAILED).same_way(Symptom(Outcome.MOUNT_FAILED))
