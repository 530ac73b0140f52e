"""A triaged finding as a maintainer reads it: its minimal steps as ops, the kernel as a
package and an upstream version, the promise broken and its source. What the fstests
test (``fstest.py``) and the report mail (``mail.py``) are made from; both need
``scenario triage STATE-ID`` to have written the report folder first."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.kernel import store as kernels
from harness.model.contract import Stamp
from harness.model.ops import Op
from harness.model.oracle import AFTER_FINAL
from harness.model.oracle.rules import times
from harness.model.shell import PATTERN
from harness.triage import report, target
from harness.triage.target import Target

# What each guarantee profile promises (harness/model/oracle/'s rules; docs/verdicts.md).
PROMISES = {
    "posix": "fsync(2)/fdatasync(2) make a file's data durable; a directory's fsync or "
    "sync(2) makes its names durable (POSIX; oracle rules 1, 6, 9)",
    "fsync-names": "fsync(2) makes a file's data durable and also the name it was called "
    "through, committing the whole inode, as journaled ext4, xfs and btrfs do (oracle "
    "rules 1, 7, 8, 10, 14, 15)",
    "ordered-metadata": "as fsync-names, and a namespace op is durable once a file or "
    "directory changed after it is fsync'd: one journal commits in order (oracle rule 18, "
    "fstests generic/785)",
}
SOURCE = "harness/model/oracle/ and docs/verdicts.md"


@dataclass(frozen=True)
class Triaged:
    target: Target
    folder: Path
    summary: dict[str, Any]  # triage.json


def load(state_id: str, db: Path) -> Triaged:
    """The finding ``state_id`` and its report folder.

    :raise InputError: not a finding (``target.NotAFinding``), or not triaged yet."""
    t = target.load(state_id, db)
    out = report.folder(t.run.id, t.state.id)
    if not (out / "triage.json").exists():
        raise InputError(
            f"crash state {t.state.id} of run {t.run.id} has not been triaged: {out} has no "
            "triage.json",
            hint=f"run `scenario triage {t.state.id}` first (it minimises the state and the "
            "workload and writes the report folder)",
        )
    return Triaged(t, out, json.loads((out / "triage.json").read_text()))


def minimal_ops(tr: Triaged) -> list[Any]:
    """The minimal workload's ops (the run's up to its oracle point when the workload was
    not minimised), the last one the crash point: the oracle point's op, or the final
    sync for a state after it. Rebuilt from the oracle's op list, which keeps every op's
    arguments but not its bytes: each write writes as many of xfs_io's pattern."""
    t = tr.target
    if not t.oracle.ops:
        raise InputError(
            f"crash state {t.state.id}: its run's oracle lists no ops (a fio, fsstress or "
            "pattern workload): there are no steps to write a test of"
        )
    body = t.oracle.workload_ops()
    point = next((i for i, o in enumerate(body) if t.state.mark and o.mark == t.state.mark), None)
    keep = tr.summary.get("workload", {}).get("keep")
    if keep is None:
        keep = range(len(body) if point is None else point + 1)
    ops = [body[i].as_op(PATTERN) for i in keep]
    if point is None:
        ops.append(Op("sync"))  # the final sync: the state is after it
    return ops


def flakey(tr: Triaged) -> bool:
    """Whether dm-flakey makes the state: a cut exactly at a persistence point."""
    s = tr.target.state
    return s.generator == "mark" and (s.exact or s.mark in AFTER_FINAL)


def kernel(tr: Triaged) -> dict[str, str]:
    """The finding's kernel: release, Debian package and its version, upstream version."""
    release = tr.target.run.guest_kernel or tr.target.kernel or "the image's kernel"
    out = {"release": release, "package": f"linux-image-{release}", "version": "", "upstream": ""}
    for k in kernels.cached():
        if release in (k.name, k.release):
            out["package"] = str(k.source.get("package", out["package"]))
            out["version"] = str(k.source.get("version", ""))
            out["upstream"] = out["version"].split("-")[0].split("+")[0]
    return out


def kernel_text(k: dict[str, str]) -> str:
    if not k["version"]:
        return f"{k['release']} ({k['package']})"
    return f"{k['release']} ({k['package']} {k['version']}, upstream {k['upstream']})"


def profile(tr: Triaged) -> str:
    return tr.target.oracle.profile or "fsync-names"


def verify_result(tr: Triaged) -> dict[str, Any]:
    """The oracle's check of the failing state (its ``mount+verify`` output), if stored."""
    for c in tr.target.checks:
        if c.checker.endswith("verify"):
            try:  # the verifier's JSON first, then whatever the check printed after it
                got, _ = json.JSONDecoder().raw_decode(c.output.lstrip())
            except ValueError:
                continue
            if isinstance(got, dict):
                return got
    return {}


def promise(tr: Triaged) -> str:
    """The promise the finding broke: the verdict's own (the weakest profile whose
    requirement failed), else the run's profile; with its rule and source."""
    name = str(verify_result(tr).get("promise") or profile(tr))
    return f"{name}: {PROMISES.get(name, '?')}; see {SOURCE}"


def symptom(tr: Triaged) -> str:
    """What was found, in the words of the oracle's check."""
    v = verify_result(tr)
    parts = [_mismatch(m) for m in v.get("mismatched", [])]
    parts += [f"{n} is missing" for n in v.get("missing", [])]
    parts += [f"{n} is back after its removal was made durable" for n in v.get("present", [])]
    parts += [f"{m['path']}: link count {m.get('got')}" for m in v.get("nlink", [])]
    return "; ".join(parts) or str(tr.summary.get("symptom", {}).get("outcome", tr.target.verdict))


def _mismatch(m: dict[str, Any]) -> str:
    if m.get("stamp"):
        return times.describe(m["path"], Stamp.from_dict(m["stamp"]))
    if m.get("size") != m.get("expected_size"):
        size, durable = m.get("size", "?"), m.get("expected_size", "?")
        return f"{m['path']} is {size} bytes where {durable} were made durable"
    return f"{m['path']} has other content than was made durable"


def short_symptom(tr: Triaged) -> str:
    """The subject's few words for it."""
    v = verify_result(tr)
    if any(m.get("stamp") for m in v.get("mismatched", [])[:1]):
        return "recovered timestamp out of its window"
    if any(m.get("expected_size") == 0 and m.get("size") for m in v.get("mismatched", [])):
        return "zero size file has non-zero size"
    if v.get("mismatched"):
        return "fsync'd file content lost"
    if v.get("missing"):
        return "fsync'd name missing"
    if v.get("present"):
        return "removed name comes back"
    return str(tr.target.verdict).replace("_", " ")
