"""``scenario triage STATE-ID --fstests DIR``: the triaged finding's minimal workload as
an fstests test in the checkout DIR (``harness/fstests/gen.py``), a copy in the report
folder, and its proof: fstests' ``./check`` with that one test in a lab guest on the
finding's kernel (it must fail) and on one without the bug (it must pass), both
outcomes written into the report folder's README (``fstests.json`` keeps them as data).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.fstests import check, gen
from harness.fstests.gen import GROUPS
from harness.model.oracle import PROFILES
from harness.triage import finding
from harness.triage.finding import Triaged

SECTION = "## fstests test"


@dataclass(frozen=True)
class Written:
    name: str  # e.g. generic/790-crashlab-3e916c9f
    path: Path  # the test in the checkout
    test: gen.Test


def build(tr: Triaged) -> gen.Test:
    """The finding's test (:raise shell.NoSpelling: an op with no shell spelling)."""
    t = tr.target
    k = finding.kernel(tr)
    about = gen.Finding(
        fs=t.fs.type,
        state_id=t.state.id,
        run_id=t.run.id,
        symptom=finding.symptom(tr),
        kernel=finding.kernel_text(k),
        rule=finding.promise(tr),
        mkfs_options=tuple(t.fs.mkfs_options),
        mount_options=tuple(t.fs.all_mount_options()),
        journaled=t.fs.journaled,
    )
    prof = finding.profile(tr)
    return gen.generate(
        finding.minimal_ops(tr),
        about,
        fsync_names=prof != PROFILES[0],
        ordered=prof == PROFILES[2],
        flakey=finding.flakey(tr),
    )


def next_name(xfstests: Path, folder: str, state_id: str) -> str:
    """``NNN-crashlab-<state id>``: fstests' test names are three digits and an optional
    ``-name`` (common/test_names), NNN the next number free in the checkout's folder --
    or the name this finding's test already has there, so generating it again rewrites
    that test rather than adding a copy under the next number."""
    tail = f"-crashlab-{state_id[:8]}"
    names = [p.name for p in (xfstests / "tests" / folder).iterdir()]
    if mine := sorted(n for n in names if re.fullmatch(rf"\d{{3}}{tail}", n)):
        return mine[0]
    used = [int(m.group(1)) for n in names if (m := re.match(r"(\d{3})(?:-|$)", n))]
    return f"{max(used, default=0) + 1:03d}{tail}"


def _group_line(d: Path, name: str) -> None:
    """The test in its folder's ``group.list`` (which ``./check`` reads for a test named
    on its command line too; ``make`` writes it from the ``_begin_fstest`` lines)."""
    groups = d / "group.list"
    if groups.exists() and name not in groups.read_text().split():
        with groups.open("a") as f:
            f.write(f"{name} {GROUPS}\n")


def write(tr: Triaged, xfstests: Path) -> Written:
    """The test and its ``.out`` in the checkout (the next free name) and in the report
    folder (``fstests/``)."""
    check.require_checkout(xfstests)
    test = build(tr)
    d = xfstests / "tests" / test.dir
    d.mkdir(parents=True, exist_ok=True)
    name = next_name(xfstests, test.dir, tr.target.state.id)
    text = test.text.replace("crashlab-NNN", name)
    path = d / name
    path.write_text(text)
    path.chmod(0o755)
    (d / f"{name}.out").write_text(test.golden(name))
    _group_line(d, name)
    copy = tr.folder / "fstests"
    copy.mkdir(exist_ok=True)
    shutil.copy(path, copy / name)
    shutil.copy(d / f"{name}.out", copy / f"{name}.out")
    w = Written(f"{test.dir}/{name}", path, test)
    record(tr, {"test": w.name, "shape": test.shape, "checkout": str(xfstests), "proof": {}})
    return w


def record(tr: Triaged, facts: dict[str, Any]) -> None:
    """``fstests.json`` and the README's fstests section, from ``facts``."""
    (tr.folder / "fstests.json").write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    readme = tr.folder / "README.md"
    text = readme.read_text() if readme.exists() else ""
    text = text.split("\n" + SECTION + "\n")[0].rstrip("\n") + "\n"
    readme.write_text(text + "\n" + "\n".join(readme_lines(facts)) + "\n")


def readme_lines(facts: dict[str, Any]) -> list[str]:
    name = facts["test"]
    shape = "dm-flakey" if facts["shape"] == "flakey" else "dm-log-writes"
    lines = [
        SECTION,
        "",
        f"`fstests/{name.split('/')[1]}` and its `.out` ({shape}), also in the checkout "
        f"`{facts['checkout']}` as `tests/{name}`: run `./check {name}` there.",
        "",
    ]
    proof = facts.get("proof") or {}
    if not proof:
        return [
            *lines,
            "Not proven yet: `scenario triage STATE-ID --fstests DIR` runs it on both "
            "kernels (harness/triage/fstest.py `prove`).",
        ]
    lines += ["| kernel | role | fstests' verdict | wanted | wall time |", "|---|---|---|---|---|"]
    for role in ("bad", "good"):
        p = proof[role]
        lines.append(
            f"| {p['kernel'] or 'the image’s'} | {'has the bug' if role == 'bad' else 'without it'}"
            f" | {p['verdict']} | {p['wanted']} | {p['seconds']:.0f} s |"
        )
    ok = all(proof[r]["verdict"] == proof[r]["wanted"] for r in ("bad", "good"))
    lines += [
        "",
        "Proven: it fails with the bug and passes without it."
        if ok
        else "NOT proven: a verdict is not the one wanted; see each run's guest.out under "
        "`fstests/proof-*`. Do not offer the test as it is.",
    ]
    return lines


def prove(tr: Triaged, w: Written, xfstests: Path, good_kernel: str | None) -> dict[str, Any]:
    """``./check`` with the one test on the finding's kernel (must fail) and on
    ``good_kernel`` (None: the image's; must pass), each in its own guest. Both outcomes
    go into ``fstests.json`` and the README; the facts are returned."""
    bad = tr.target.kernel  # as the run booted it (None: the image's)
    proof: dict[str, Any] = {}
    for role, k, wanted in (("bad", bad, "failed"), ("good", good_kernel, "passed")):
        out = tr.folder / "fstests" / f"proof-{role}"
        out.mkdir(parents=True, exist_ok=True)
        fst = check.stage(xfstests, out)
        disks = check.fresh_disks(out, tr.target.fs.type)
        c = check.run(fst, disks, [w.name], fstyp=tr.target.fs.type, out=out, kernel=k)
        shutil.rmtree(out / "stage", ignore_errors=True)
        for img in (fst, *disks.values()):
            img.unlink(missing_ok=True)
        proof[role] = {
            "kernel": k or "",
            "verdict": c.verdict(w.name),
            "wanted": wanted,
            "seconds": c.seconds,
            "exit_status": c.exit_status,
        }
    facts = {"test": w.name, "shape": w.test.shape, "checkout": str(xfstests), "proof": proof}
    record(tr, facts)
    return facts
