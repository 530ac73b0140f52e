"""The report folder of a triaged state, ``<run>/triage/<state-id>/``: what a developer
attaches to a mailing-list report.

* ``README.md``: symptom, kernel, filesystem, mkfs and mount options, outcome, oracle
  rule, the minimal state, how to reproduce, what each file is;
* ``triage.json``: the same as data (what ``scenario results show`` links to);
* ``slice.log`` and ``slice.txt``: the minimal state's differing writes as a
  dm-log-writes log of their own, and listed;
* ``replay.sh``: fstests' ``replay-log`` commands that rebuild the minimal state from
  the run's log;
* ``explained.txt``: each differing write, block by block (``blocks.py``);
* ``tree.md``: expected vs found, where the run has an oracle;
* ``workload.sh``: the run's workload, where it can be rendered (``workload.py``);
* ``minimal-workload.sh``: the minimal workload (``workmin.py``), when it was searched.

The result is kept as files in the run's directory rather than as rows in the store:
it is an artefact derived from a stored state (a triage adds no verdict), and a folder
is what gets attached, copied and read; the store's schema stays as it is.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any

from harness import paths
from harness.check import promises
from harness.crashstate.statelog import file_name
from harness.record import logwrites
from harness.record.logwrites import SECTOR, Log
from harness.triage import blocks, tree, workload
from harness.triage.minimal import Result
from harness.triage.symptom import Symptom

WORKLOAD_NOT_ASKED = (
    "The workload is not minimised (`--no-workload`): `workload.sh` is the run's whole "
    "workload; `scenario triage` without `--no-workload` searches the minimal one."
)


def folder(run_id: str, state_id: str) -> Path:
    return paths.work_dir() / "runs" / run_id / "triage" / file_name(state_id)


def triaged(run_id: str) -> list[Path]:
    """The report folders of a run's triaged states (their README.md), by state id."""
    root = paths.work_dir() / "runs" / run_id / "triage"
    return sorted(p / "README.md" for p in root.glob("*") if (p / "triage.json").exists())


def write(r: Result, lg: Log) -> Path:
    """Write ``r``'s report folder; its path."""
    t = r.target
    out = folder(t.run.id, t.state.id)
    out.mkdir(parents=True, exist_ok=True)
    entries = r.entries
    logwrites.write_slice(lg, entries, out / "slice.log")
    (out / "slice.txt").write_text("\n".join(_slice_lines(lg, entries)) + "\n")
    (out / "replay.sh").write_text(replay_script(r, lg))
    (out / "explained.txt").write_text("\n".join(r.explanation.lines() or ["(no writes)"]) + "\n")
    files = ["triage.json", "slice.log", "slice.txt", "replay.sh", "explained.txt"]
    if t.oracle:
        rows = tree.table(t.oracle.raw, t.state.mark, t.state.exact, r.found.note)
        (out / "tree.md").write_text("\n".join(rows) + "\n")
        files.append("tree.md")
    ace = t.workload or None  # a search run's workload
    script = workload.script(t.params, t.oracle, t.run.seed, ace=ace)
    if script is not None:
        (out / "workload.sh").write_text(script)
        files.append("workload.sh")
    w = r.workload
    if w is not None and w.search is not None:
        small = workload.script(t.params, t.oracle, t.run.seed, keep=w.keep, ace=ace)
        if small is not None:
            (out / "minimal-workload.sh").write_text(small)
            files.append("minimal-workload.sh")
    (out / "triage.json").write_text(json.dumps(summary(r), indent=1, sort_keys=True) + "\n")
    (out / "README.md").write_text(readme(r, files))
    return out


def summary(r: Result) -> dict[str, Any]:
    t, s = r.target, r.search
    return {
        "run": t.run.id,
        "state": t.state.to_dict(),
        "verdict": str(t.verdict),
        "promise": dict(zip(("profile", "broken", "rule"), promise(r), strict=True)),
        "symptom": _symptom(r.original),
        "base": {"text": r.delta.base_text, "symptom": _symptom(r.base)},
        "differing": {"kind": r.delta.kind, "before": len(r.delta.items), "after": len(s.items)},
        "minimal": {
            "state": r.state.to_dict(),
            "items": list(s.items),
            "entries": r.entries,
            "symptom": _symptom(r.found),
        },
        "candidates": {
            "tried": r.candidates,
            "rounds": s.rounds,
            "host": r.tally.host,
            "guest": r.tally.guest,
            "guest_boots": r.tally.guest_boots,
            "same_image": r.tally.same_image,
            "harness": r.tally.harness,
            "capped": s.capped,
        },
        "seconds": round(r.seconds, 1),
        "workload": _workload(r),
        **({"search_workload": t.workload["id"]} if t.workload else {}),
        "late": {k: {"entry": e, "after_mark": m} for k, (e, m) in r.late.items()},
    }


def _workload(r: Result) -> dict[str, Any]:
    w = r.workload
    if w is None:
        return {"minimised": False, "why": "--no-workload"}
    out: dict[str, Any] = {
        "minimised": w.search is not None,
        "why": w.not_minimised,
        "recording_guests": w.rounds,
        "candidates": dict(sorted(w.tally.items())),
        "seconds": round(w.seconds, 1),
    }
    if w.plan is not None:
        out["ops_before"] = len(w.plan.ops)
        out["ops_to_point"] = len(w.plan.keep(w.plan.items))
        out["oracle_point"] = {"op": w.plan.point, "mark": w.plan.mark}
    if w.search is not None:
        out |= {
            "ops_after": len(w.keep),
            "keep": list(w.keep),
            "tried": w.candidates,
            "ddmin_rounds": w.search.rounds,
            "capped": w.search.capped,
            "symptom": _symptom(w.found) if w.found else None,
        }
    return out


def workload_lines(r: Result) -> list[str]:
    """The README's account of the minimal workload (or why there is none)."""
    w = r.workload
    if w is None:
        return [WORKLOAD_NOT_ASKED]
    if w.plan is None or w.search is None:
        return [f"The workload is not minimised: {w.not_minimised}."]
    p, s = w.plan, w.search
    point = "its end (the final sync)" if p.point is None else f"op {p.point}"
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(w.tally.items()))
    budget = f", stopped by the budget of {s.tried} candidates" if s.capped else ""
    lines = [
        f"Minimised (`harness/triage/workmin.py`): ddmin over the ops before the failing "
        f"state's oracle point, mark `{p.mark}` = {point} (kept in every candidate), each "
        "candidate re-recorded in a guest under dm-log-writes and its states at that point "
        "re-checked.",
        "",
        "| | |",
        "|---|---|",
        f"| ops | {len(p.ops)} in the workload, {len(p.keep(p.items))} up to its oracle point "
        f"-> {len(w.keep)} (each with the final sync) |",
        f"| kept ops | {', '.join(map(str, w.keep))} |",
        f"| candidates | {w.candidates} ({kinds}){budget} |",
        f"| rounds | 1 + {s.rounds} ddmin rounds in {w.rounds} recording guests (round 0: the "
        "whole workload and the empty one; a round of only non-workloads needs none) |",
        f"| wall time | {w.seconds:.0f} s |",
        f"| its symptom | {w.found.text() if w.found else '-'} |",
        "",
        "```",
        *(f"{i}: {workload.render(p.ops[i])}" for i in w.keep),
        "```",
        "",
        "`minimal-workload.sh` is it as a shell program; `workload.sh` is the whole one.",
    ]
    if w.tally.get("harness"):
        lines += [
            "",
            f"{w.tally['harness']} candidates the lab could not record or judge were taken "
            "as not failing: the workload may keep more ops than it needs.",
        ]
    return lines


def _symptom(s: Symptom) -> dict[str, Any]:
    return {"outcome": str(s.outcome), "findings": sorted(s.findings), "checks": s.detail}


def _slice_lines(lg: Log, entries: list[int]) -> list[str]:
    out = ["# entry index in the run's log, sectors (512 B), flags, sha256 of the data"]
    for i in entries:
        e = lg.entries[i]
        data = lg.data(e)
        try:
            digest = hashlib.sha256(data).hexdigest()[:16] if e.data_len else "-"
        finally:
            data.release()
        out.append(f"{i}\t{e.sector}+{e.nr_sectors}\t{blocks.flags_text(e)}\t{digest}")
    return out


def replay_script(r: Result, lg: Log) -> str:
    """fstests' replay-log commands (and a dd for a torn write's kept sectors) that
    rebuild the minimal state from the run's log on a zeroed device."""
    s = r.state
    dropped = set(s.dropped)
    applied = [i for i in range(s.prefix) if i not in dropped and i != s.torn]
    lines = [
        "#!/bin/sh",
        "# Rebuild the minimal crash state with fstests' src/log-writes/replay-log.",
        "# Entries are numbered as replay-log counts them: every entry, marks included, from 0.",
        "set -e",
        f"LOG=${{LOG:-{shlex.quote(str(r.target.log_path))}}}",
        "DEV=${1:?usage: replay.sh DEVICE (zeroed, at least "
        f"{r.target.size} bytes: truncate -s {r.target.size} s.img; losetup -f --show s.img)}}",
    ]
    for first, last in _spans(applied):
        start = f" --start-entry {first}" if first else ""
        lines.append(f'replay-log --log "$LOG" --replay "$DEV"{start} --limit {last - first + 1}')
    if s.torn is not None:
        e = lg.entries[s.torn]
        lines.append(f"# entry {s.torn} torn: only these sectors of it reach the disk")
        for first, count in s.torn_runs:
            skip = e.data_offset // SECTOR + first
            lines.append(
                f'dd if="$LOG" of="$DEV" bs=512 skip={skip} seek={e.sector + first} '
                f"count={count} conv=notrunc status=none"
            )
    fs = r.target.fs
    lines += [
        "# then, as fstests' generic/482 does: mount (the kernel's own recovery), fsck",
        f"#   {command(fs.mount_argv('$DEV', '$MNT'))}",
        "#   umount $MNT && fsck -n $DEV",
    ]
    return "\n".join(lines) + "\n"


def late_lines(r: Result) -> list[str]:
    """Where each file found wrong first reaches the log after the cut."""
    out = [
        f"- `{name}`: its blocks first reach the log at entry {entry}"
        + (f", after mark `{mark}`" if mark else "")
        for name, (entry, mark) in sorted(r.late.items())
    ]
    return [*out, ""] if out else []


def command(argv: list[str]) -> str:
    """``argv`` as a shell line, leaving ``$DEV`` and ``$MNT`` for the shell to expand."""
    return " ".join(a if a in ("$DEV", "$MNT") else shlex.quote(a) for a in argv)


def _spans(indices: list[int]) -> list[tuple[int, int]]:
    """Consecutive runs of sorted ``indices`` as (first, last)."""
    out: list[tuple[int, int]] = []
    for i in indices:
        if out and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def readme(r: Result, files: list[str]) -> str:
    t, s, d = r.target, r.search, r.delta
    fs = t.fs
    run = t.run
    kernel = run.guest_kernel or "the image's"
    if t.kernel:
        kernel += f" (--kernel {t.kernel})"
    rules = sorted({rule for rule, _ in r.original.findings}) or ["- (no oracle finding)"]
    kept = sorted(r.found.findings & r.original.findings)
    budget = f", stopped by the budget of {s.tried} candidates" if s.capped else ""
    if r.tally.harness:
        budget += f", {r.tally.harness} the lab could not judge (taken as not failing)"
    lines = [
        f"# {fs.type}: crash state {t.state.id} ({t.verdict})",
        "",
        f"Found by run `{run.id}` (scenario `{run.scenario}`, seed {run.seed}); triaged by "
        f"`scenario triage {t.state.id}`.",
        "",
        "| | |",
        "|---|---|",
        f"| symptom | {r.original.text()} |",
        f"| outcome | {t.verdict} |",
        f"| oracle rule | {'; '.join(rules)} |",
        *(f"| {k} | {v} |" for k, v in map(_split, promises.explain(*promise(r)))),
        f"| kernel | {kernel} |",
        f"| filesystem | {fs.type} on a {t.size}-byte device |",
        f"| mkfs | `{command(fs.mkfs_argv('$DEV'))}` |",
        f"| mount | `{command(fs.mount_argv('$DEV', '$MNT'))}` |",
        *([f"| workload | `{t.workload['id']}`: {t.workload['ops']} |"] if t.workload else []),
        f"| failing state | {t.state.describe()} |",
        f"| its base | {d.base_text}: {r.base.text()} |",
        f"| differing writes | {len(d.items)} -> {len(s.items)} "
        f"({d.kind}; {d.describe(s.items)}) |",
        f"| minimal state | {r.state.describe()} |",
        f"| minimal symptom | {r.found.text()} |",
        f"| triage | {r.seconds:.0f} s, {r.candidates} candidates in {s.rounds + 1} rounds: "
        f"{r.tally.host} host checks, {r.tally.guest} guest checks in {r.tally.guest_boots} "
        f"boots, {r.tally.same_image} of a known image{budget} |",
        "",
    ]
    if not s.items:
        lines += [
            "No differing write is needed: the base already fails the same way. What the "
            f"oracle requires at mark `{t.state.mark}` is not in the log before entry "
            f"{t.state.prefix}: a write that never happened, not a wrong one.",
            "",
            *late_lines(r),
        ]
    elif kept != sorted(r.original.findings):
        lines += [f"The minimal state keeps {len(kept)} of the failing state's findings.", ""]
    lines += [
        "## The minimal state's writes",
        "",
        "```",
        *(r.explanation.lines() or ["(none)"]),
        "```",
        "",
        "## Reproduce",
        "",
        "- fstests: `replay.sh DEVICE` replays the run's log with `replay-log` up to the "
        "minimal state (`LOG=` points at the run's log), then mount and fsck as generic/482 does.",
        f"- the lab: `scenario reproduce {t.state.id}` rebuilds the failing state's image; "
        f"`scenario triage {t.state.id}` finds this minimal state again (deterministic).",
        "",
        "## Workload",
        "",
        *workload_lines(r),
        "",
        "## Files",
        "",
        *(f"- `{f}`: {_FILES[f]}" for f in files),
        "",
    ]
    return "\n".join(lines)


def promise(r: Result) -> tuple[str | None, str | None, str | None]:
    """(profile judged by, promise broken, rule) of the triaged state: as stored, or for
    a state stored before schema 10 the profile its run's oracle names."""
    p, oracle = r.target.promise, r.target.oracle
    if p is not None:
        return p.profile, p.broken, p.rule
    return oracle.profile, None, None


def _split(line: str) -> tuple[str, str]:
    key, _, value = line.partition(": ")
    return key, value


_FILES = {
    "triage.json": "this report as data (what `scenario results show` finds)",
    "slice.log": "the differing writes as a dm-log-writes log of their own",
    "slice.txt": "the same writes listed: entry, sectors, flags, data digest",
    "replay.sh": "fstests' replay-log commands that rebuild the minimal state",
    "explained.txt": "each differing write, block by block",
    "tree.md": "expected (the oracle) vs found (the minimal state's check)",
    "workload.sh": "the run's workload as a shell script (rendered from the oracle's op list)",
    "minimal-workload.sh": "the minimal workload as a shell script (the kept ops, rendered)",
}
