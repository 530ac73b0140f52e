"""Judging a state's other recovery modes (harness/model/recovery.py), one check each,
and what the read-write check shares with them: a failed mount's outcome, the oracle's
note and the promise a finding broke.

Each mode is judged by what it promises: ``ro`` and ``remount`` as the read-write mount
(refusing is a finding, so is showing less than was made durable; a second mount must
also change nothing); ``ro-device`` may refuse (replay needs a writable device) but must
not show less; the no-replay modes (``noload``, ``norecovery``, ``nologreplay``) promise no
durability, so they are measured -- did it mount, how much of the durable state it shows
-- and never a finding. Their seconds are the check's, not the state's recovery phases
(the recovery-time tables stay the read-write mount's).
"""

from __future__ import annotations

import json
from dataclasses import replace

from harness.check import promises
from harness.check.host import CheckResult
from harness.model import contract, recovery
from harness.model.oracle import rules
from harness.outcome import Outcome, is_finding, reduce

# mount(8) exit bits that are the lab's problem, not the filesystem's: bad usage or
# permissions, a system error, a mount bug, interrupted, mtab. 32 is "mount failure".
MOUNT_HARNESS_BITS = 1 | 2 | 4 | 8 | 16
# ...and a failure (32) whose cause is the guest, not the image: no driver for the fs.
MOUNT_HARNESS_WORDS = ("unknown filesystem type", "does not exist", "no such device")


def mount_failure(mount: contract.Command) -> Outcome:
    """A mount that failed: a hang, the lab's own failure (its exit bits or words), else
    the filesystem's refusal of the image."""
    text = mount.output.lower()
    if "[timed out]" in text:
        return Outcome.TIMEOUT
    if mount.rc & MOUNT_HARNESS_BITS or any(w in text for w in MOUNT_HARNESS_WORDS):
        return Outcome.HARNESS_ERROR
    return Outcome.MOUNT_FAILED


def verdict_note(verify: contract.Verdict) -> str:
    """What the oracle found, as the store keeps it (``promises.rule_of`` reads it back)."""
    said = verify.to_dict()
    keys = ("mark", "missing", "mismatched", "present", "nlink", "error")
    return json.dumps({k: said[k] for k in keys if said.get(k)})[:1500]


def promised(judged: CheckResult, verify: contract.Verdict | None) -> CheckResult:
    """``judged`` with the oracle's profile, the promise its finding broke and the rule,
    read off the typed verdict (a twin that takes this verdict has no note)."""
    if verify is None:
        return judged
    if judged.outcome is not Outcome.DATA_LOSS:
        rule = ""
    elif verify.ok:  # an application pattern's broken promise: no oracle rule failed
        rule = promises.rule_of(judged.outcome, [judged])[0]
    else:
        rule = rules.broken(verify)[0].name
    return replace(judged, profile=verify.profile or "", promise=verify.promise or "", rule=rule)


def judge_modes(facts: contract.CheckFacts) -> list[CheckResult]:
    return [judge_mode(m) for m in facts.modes]


def judge_mode(m: contract.ModeFacts) -> CheckResult:
    """One mode's facts -> its check (checker ``mount[MODE]+verify``)."""
    name = f"mount[{m.mode}]+verify"
    if m.error or m.mount is None:  # the overlay, or a bug of ours: the lab's
        return CheckResult("guest", name, Outcome.HARNESS_ERROR, None, 0.0, m.error[-1500:])
    seconds = m.mount.seconds + (m.umount.seconds if m.umount else 0.0)
    out = [f"mount [{m.mode}]: exit {m.mount.rc}", m.mount.output]
    if m.mount.rc != 0:
        outcome = mount_failure(m.mount)
        note = ""
        if outcome is Outcome.MOUNT_FAILED and m.mode == recovery.RO_DEVICE:
            outcome, note = Outcome.CONSISTENT, "refused: replay needs a writable device"
        elif outcome is Outcome.MOUNT_FAILED and not recovery.judged(m.mode):
            outcome, note = Outcome.CONSISTENT, "did not mount without replay (no promise)"
        return CheckResult("guest", name, outcome, m.mount.rc, seconds, _text(out), note=note)
    outcomes = [Outcome.CONSISTENT]
    note = ""
    verify = m.verify
    if verify is not None and not verify.ok:
        if recovery.judged(m.mode):
            outcomes.append(Outcome.DATA_LOSS)
            note = verdict_note(verify)
        else:
            held = verify.checked - len(verify.missing) - len(verify.mismatched)
            note = f"without replay: {held} of {verify.checked} requirements held (no promise)"
    if m.changed:
        outcomes.append(Outcome.DATA_LOSS)
        note = (note + " " + json.dumps({"changed_by_remount": m.changed[:20]})).strip()
        out.append("the second mount changed: " + ", ".join(m.changed[:20]))
    if m.umount is not None and m.umount.rc != 0:
        out.append(f"umount failed ({m.umount.rc}): {m.umount.output}")
        outcomes.append(Outcome.HARNESS_ERROR)
    outcome = reduce(outcomes)
    judged = CheckResult("guest", name, outcome, 0, seconds, _text(out), note=note[:1500])
    if not is_finding(outcome) or not recovery.judged(m.mode):
        return judged
    return promised(judged, verify if verify is not None and not verify.ok else None)


def _text(parts: list[str]) -> str:
    return "\n".join(p for p in parts if p)[-1500:]
