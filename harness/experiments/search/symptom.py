"""A finding's symptom: what broke (outcome and oracle rule), to which name (its role in
the workload) and under which ops -- the fields ``scenario results bugs`` clusters by.

The same symptom across workloads is most often one bug met many ways (CrashMonkey
reports them so); the cluster lists its smallest workload first, the one to read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from harness.check.host import CheckResult
from harness.outcome import Outcome

# The oracle's verdict keys (harness/guest/oracle.py verify) -> the rule a state broke.
MISMATCH_RULES = (
    ("xattrs", "xattrs"),
    ("prefix", "append-prefix"),
    ("either", "rename-atomic"),
    ("error", "unreadable"),
)


def of(
    verdict: Outcome, results: Sequence[CheckResult], workload: dict[str, Any], fs: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(cell, metrics) of one finding state of ``workload`` (``ace.describe``)."""
    rule, path = _rule(verdict, results)
    cell = {
        "fs": fs,
        "outcome": str(verdict),
        "rule": rule,
        "role": role(path, workload.get("roles", {})),
        "op_class": workload["op_class"],
        "persistence": workload["persistence"],
    }
    metrics = {"workload": workload["id"], "ops": workload["ops"], "seq": workload["seq"]}
    if path is not None:
        metrics["path"] = path
    return cell, metrics


def _rule(verdict: Outcome, results: Sequence[CheckResult]) -> tuple[str, str | None]:
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
    for m in facts.get("mismatched", []):
        for key, rule in MISMATCH_RULES:
            if key in m:
                return rule, m.get("path")
        return "content", m.get("path")
    if facts.get("present"):
        return "removal-undone", str(facts["present"][0])
    if facts.get("nlink"):
        return "nlink", facts["nlink"][0].get("path")
    return "data-loss", None


def role(path: str | None, roles: dict[str, str]) -> str:
    """What ``path`` is to the workload's ops: their target or destination, a name in a
    directory they changed, or a bystander (the base's other files)."""
    if path is None:
        return "-"
    if path in roles:
        return roles[path]
    for name, r in roles.items():
        if path.startswith(name + "/"):
            return f"under {r}"
    return "bystander"
