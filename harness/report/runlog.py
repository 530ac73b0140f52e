"""One consolidated, human-readable log per run under ``results/runs/<run-id>.log``.

Everything the store knows about a run in one text file a person can read, attach to a
bug report or grep: where it ran, the resolved scenario, verdict counts, recovery-time
statistics, then every crash state with each check's outcome, time and output excerpt.
The store stays the source of truth; the file is rewritten whole (via a temporary file
and a rename, so a reader never sees half of it) each time it is written.

``scenario run`` (harness/cli/run.py) calls ``write_run_log(db, run_id)`` after its
summary; ``scenario campaign run`` calls it after each element.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness import paths
from harness.store.db import RunDetail, Store


def log_path(run_id: str, directory: Path | None = None) -> Path:
    return (directory or paths.results_dir() / "runs") / f"{run_id}.log"


def write_run_log(db: Path, run_id: str, directory: Path | None = None) -> Path:
    """Write the run's consolidated log; returns its path.

    :raise InputError: no such store or run.
    """
    with Store.open(db, create=False) as st:
        detail = st.run_detail(run_id)
    out = log_path(detail.run.id, directory)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(render(detail, db))
    tmp.replace(out)
    return out


def render(d: RunDetail, db: Path | None = None) -> str:
    r = d.run
    lines = [
        f"crashlab run {r.id}",
        f"scenario     {r.scenario} ({r.kind})",
        f"status       {r.status}",
        f"started      {r.started_at}",
        f"finished     {r.finished_at or '-'}",
        f"duration     {'-' if r.duration is None else f'{r.duration:.1f} s'}",
        f"seed         {r.seed}",
        f"host         {r.host or '-'}  accelerator {r.accelerator or '-'}",
        f"guest kernel {r.guest_kernel or '-'}",
        f"qemu         {r.qemu_version or '-'}",
        f"image        {r.image_hash or '-'}",
    ]
    if db is not None:
        lines.append(f"store        {db}")
    counts = "  ".join(f"{o} {n}" for o, n in r.outcome_counts.items()) or "none"
    expected = "  ".join(f"{o} {n}" for o, n in r.account.expected.items())
    lines += [f"outcomes     {counts}"]
    lines += [f"expected     {expected} (by the kind's rule: not findings)"] if expected else []
    lines += [f"exit status  {'-' if r.exit_status is None else r.exit_status}", ""]
    if r.summary:
        lines += ["== summary", json.dumps(r.summary, indent=2, sort_keys=True), ""]
    lines += ["== parameters", json.dumps(dict(r.params), indent=2, sort_keys=True), ""]
    if r.tool_versions:
        lines += ["== tools"]
        lines += [f"{k} {v}" for k, v in sorted(r.tool_versions.items())]
        lines.append("")
    if d.recovery:
        lines += [
            "== recovery time (seconds)",
            f"{'phase':<16}{'n':>6}" + "".join(f"{c:>10}" for c in ("mean", "p50", "p95", "max")),
        ]
        for ph in d.recovery:
            lines.append(
                f"{ph.phase:<16}{ph.n:>6}"
                + "".join(f"{v:>10.3f}" for v in (ph.mean, ph.p50, ph.p95, ph.max))
            )
        lines.append("")
    lines.append(f"== crash states ({len(d.states)})")
    for s in d.states:
        lines.append(
            f"-- {s.id}  {s.outcome or 'not checked'}  generator {s.generator}"
            f"  prefix {s.prefix}  last mark {s.last_mark or '-'}"
        )
        if s.description:
            lines.append(f"   {s.description}")
        for c in s.checks:
            lines.append(
                f"   [{c.stage}/{c.checker}] {c.outcome}  exit {c.exit_status}  {c.seconds:.3f} s"
            )
            if c.output and c.outcome != "consistent":
                lines += ["      " + line for line in c.output.rstrip().splitlines()]
    return "\n".join(lines) + "\n"
