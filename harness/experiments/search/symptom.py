"""A finding's symptom: what broke (outcome and oracle rule), to which name (its role in
the workload) and under which ops -- the fields ``scenario results bugs`` clusters by.

The same symptom across workloads is most often one bug met many ways (CrashMonkey
reports them so); the cluster lists its smallest workload first, the one to read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.check.host import CheckResult
from harness.check.promises import rule_of
from harness.outcome import Outcome


def of(
    verdict: Outcome, results: Sequence[CheckResult], workload: dict[str, Any], fs: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(cell, metrics) of one finding state of ``workload`` (``ace.describe``)."""
    rule, path = rule_of(verdict, results)
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
