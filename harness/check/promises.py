"""Which promise a finding broke, in words a maintainer reads at a glance: the guarantee
profile the state was judged by (``harness/model/oracle/`` PROFILES), the weakest
profile whose rule it broke (the oracle's ``promise``: ``posix`` is the floor, a
``fsync-names`` or ``ordered-metadata`` break is one of a stronger promise than POSIX
makes), and the oracle rule, each with its source (docs/verdicts.md).

The rule is named where the typed verdict is judged (``check.guest``, from
``oracle/rules.py``); ``rule_of`` reads it back from a stored check's note only for a
state judged before the rule was kept beside it. ``experiments/search/symptom.py``
clusters findings by the same rule.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from harness.check.host import CheckResult
from harness.model.oracle import rules
from harness.model.oracle.rules import MISMATCH_RULES
from harness.outcome import Outcome

# The profiles, weakest first, and what each promises on top of the one before.
PROFILES = {
    "posix": "POSIX: fsync/fdatasync make a file's data durable; a name needs its"
    " directory's fsync or sync (fsync(2), docs/verdicts.md rule 1)",
    "fsync-names": "journaled ext3/ext4, xfs, btrfs (not POSIX): fsync also persists the"
    " name it was called through and commits the whole inode (docs/verdicts.md rule 1)",
    "ordered-metadata": "strictly ordered metadata (not POSIX): a namespace op is durable"
    " once anything changed after it is fsync'd (docs/verdicts.md rule 18; btrfs's"
    " maintainers test it, fstests generic/785)",
}

# Each rule name -> its number and words in docs/verdicts.md (the oracle's own table).
RULES = {r.name: r.text() for r in rules.TABLE}
# A failed log replay, a refused mount, a checker that finds damage: under every rule.
ANY_RULE = "no promise allows it: a refused mount or damage is a finding under every rule"


def rule_of(verdict: Outcome, results: Sequence[CheckResult]) -> tuple[str, str | None]:
    """The oracle rule a data_loss broke and the first name it broke it on; for the
    other findings, which checker saw them."""
    if verdict is not Outcome.DATA_LOSS:
        seen = next((r for r in results if r.outcome is verdict), None)
        return (f"{seen.stage} {seen.checker}" if seen else str(verdict)), None
    note = next((r.note for r in results if r.note.startswith("{")), "")
    try:
        facts: dict[str, Any] = json.loads(note) if note else {}
    except ValueError:  # cut at the store's length: the rule is still its first key
        facts = {}
    if facts.get("missing"):
        path = str(facts["missing"][0])
        return ("dir-missing" if path.endswith("/") else "file-missing"), path.rstrip("/")
    mismatched = facts.get("mismatched", [])
    for m in [m for m in mismatched if "stamp" not in m][:1]:  # a time last (rules.broken)
        for key, rule in MISMATCH_RULES:
            if key in m:
                return rule, m.get("path")
        return "content", m.get("path")
    if facts.get("present"):
        return "removal-undone", str(facts["present"][0])
    if facts.get("nlink"):
        return "nlink", facts["nlink"][0].get("path")
    if mismatched:
        return "times", mismatched[0].get("path")
    return "data-loss", None


def broken(verdict: Outcome, results: Sequence[CheckResult]) -> tuple[str | None, str | None]:
    """(the profile the state was judged by, the promise its finding broke): the guest
    oracle's, None where no oracle judged it; a finding the oracle did not make (a
    mount, a checker) broke the floor, POSIX's."""
    profile = next((r.profile for r in results if r.profile), None)
    promise = next((r.promise for r in results if r.promise), None)
    if promise is None and profile is not None and verdict is not Outcome.DATA_LOSS:
        promise = "posix"
    return profile, promise


def explain(profile: str | None, promise: str | None, rule: str | None) -> list[str]:
    """A finding's promise in lines: the profile judged by, the promise broken (and
    whether it is POSIX's floor or a stronger one), the rule; each with its source."""
    if promise is None and profile is None:
        return ["promise: not stored (checked before the lab kept it, or no oracle)"]
    out = [f"judged by: {profile or '-'}"]
    if promise is not None:
        floor = "the POSIX floor" if promise == "posix" else "stronger than POSIX"
        out.append(f"promise broken: {promise} ({floor}) -- {PROFILES.get(promise, '?')}")
    if rule is not None:
        out.append(f"rule: {rule} -- {RULES.get(rule, ANY_RULE)}")
    return out
