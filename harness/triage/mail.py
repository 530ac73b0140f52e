"""``scenario triage STATE-ID --report``: ``report.eml`` in the report folder, a plain-text
bug report in the form kernel lists expect (RFC 5322, built with the stdlib ``email``
package): subject naming the filesystem and symptom, the kernel as a package and an
upstream version, mkfs and mount options, the minimal steps, the promise broken and its
source, what was found, the state as a dm-log-writes slice (attached, with the
``replay-log`` line) and the fstests test when one was generated. Nothing is sent: no
network is used; sending is the user's act."""

from __future__ import annotations

import json
import textwrap
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path

from harness.triage import finding, report, workload
from harness.triage.finding import Triaged

LISTS = {
    "btrfs": "linux-btrfs@vger.kernel.org",
    "ext4": "linux-ext4@vger.kernel.org",
    "ext3": "linux-ext4@vger.kernel.org",
    "ext2": "linux-ext4@vger.kernel.org",
    "xfs": "linux-xfs@vger.kernel.org",
    "f2fs": "linux-f2fs-devel@lists.sourceforge.net",
    "jfs": "jfs-discussion@lists.sourceforge.net",
}
FALLBACK = "linux-fsdevel@vger.kernel.org"


# How the run ended its workload (crash.method): the subject's words and the body's.
ENDS = {
    "power-cut": (
        "power failure", "a power failure (a crash state replayed from a dm-log-writes log)",
        "what fsync promised",
    ),
    "shutdown": (
        "shutdown", "a shutdown (FS_IOC_SHUTDOWN, default flag: a freeze first)",
        "what the shutdown's freeze (a sync) promised",
    ),
    "shutdown-logflush": (
        "log-flushing shutdown", "a shutdown (FS_IOC_SHUTDOWN with the log flush)",
        "what fsync and the shutdown's log flush promised",
    ),
    "shutdown-nologflush": (
        "shutdown", "a shutdown (FS_IOC_SHUTDOWN without a log flush)", "what fsync promised"
    ),
}  # fmt: skip


def ended(tr: Triaged) -> tuple[str, str, str]:
    """How the finding's run ended the workload, short and long, and what was promised."""
    method = str(tr.target.params.get("crash", {}).get("method", "power-cut"))
    return ENDS.get(method, ENDS["power-cut"])


def subject(tr: Triaged) -> str:
    k = finding.kernel(tr)
    version = k["upstream"] or k["release"]
    extra = f"Debian {k['version']}" if k["version"] else k["release"]
    where = version if extra == version else f"{version} ({extra})"  # the kernel once
    return (
        f"[REPORT] {tr.target.fs.type}: {finding.short_symptom(tr)} after {ended(tr)[0]} on {where}"
    )


def body(tr: Triaged) -> str:
    t = tr.target
    fs = t.fs
    k = finding.kernel(tr)
    steps = [workload.step(o) for o in finding.minimal_ops(tr)]
    lines = [
        "Hello,",
        "",
        f"after {ended(tr)[1]}, {fs.type} loses {ended(tr)[2]}: {finding.symptom(tr)}.",
        "",
        f"Kernel: {k['release']}"
        + (
            f" (Debian {k['package']} {k['version']}, upstream {k['upstream']})"
            if k["version"]
            else f" ({k['package']})"
        ),
        f"mkfs: {report.command(fs.mkfs_argv('$DEV'))}",
        f"mount: {report.command(fs.mount_argv('$DEV', '$MNT'))}",
        "",
        "Steps (each a system call; $M is the mount point; the crash is right after the last "
        "one returned):"
        if finding.flakey(tr)
        else "Steps (each a system call; $M is the mount point; the crash state is cut after the "
        "last one, between two flushes):",
        "",
        *(f"  {s}" for s in steps),
        "",
        f"What was promised ({finding.promise(tr)}):",
        f"  after the last step, {_required(tr)}.",
        "",
        "What was found after mounting (log replay):",
        f"  {finding.symptom(tr)}",
        "",
        "The crash state is attached as a dm-log-writes log of the writes it differs by "
        "(slice.log); the whole state is replayed from the recorded log with fstests' "
        "replay-log:",
        "",
        *(f"  {line}" for line in _replay_lines(tr)),
        "",
    ]
    test = _fstests_test(tr)
    if test is not None:
        facts = json.loads((tr.folder / "fstests.json").read_text())
        proof = facts.get("proof") or {}
        lines += [
            f"An fstests test of these steps is attached ({test.name}, with its .out): "
            "./check " + facts["test"] + " in an fstests checkout.",
            *(f"  on {p['kernel'] or 'the stock kernel'}: {p['verdict']}" for p in proof.values()),
            "",
        ]
    lines += [
        f"Found by crashlab (run {t.run.id}, crash state {t.state.id}); "
        f"`scenario triage {t.state.id}` reproduces the triage.",
        "",
    ]
    return "\n".join(_wrap(lines))


def _wrap(lines: list[str]) -> list[str]:
    """Prose at 72 columns, as lists read it; indented lines (steps, commands) as they are."""
    out: list[str] = []
    for line in lines:
        whole = not line or line.startswith(("  ", "Kernel:", "mkfs:", "mount:"))
        out += [line] if whole else textwrap.wrap(line, 72)
    return out


def _required(tr: Triaged) -> str:
    v = finding.verify_result(tr)
    names = [m["path"] for m in v.get("mismatched", [])] + list(v.get("missing", []))
    gone = list(v.get("present", []))
    out = []
    if names:
        out.append(", ".join(names) + " must hold what was made durable (size and content)")
    if gone:
        out.append(", ".join(gone) + " must stay removed")
    return "; ".join(out) or "the state must mount and hold what was made durable"


def _replay_lines(tr: Triaged) -> list[str]:
    script = tr.folder / "replay.sh"
    if not script.exists():
        return ["(replay.sh is missing from the report folder)"]
    lines = [ln for ln in script.read_text().splitlines() if ln.startswith(("replay-log", "dd "))]
    return [
        f"LOG={tr.target.log_path.name}  # the run's recorded log (on request: it is large)",
        *lines,
        "replay-log --log slice.log --replay $DEV  # the attached slice: the differing "
        "writes alone, onto the state before them",
    ]


def _fstests_test(tr: Triaged) -> Path | None:
    """The test fstests.json names (the last generated; the folder may keep older ones)."""
    facts = tr.folder / "fstests.json"
    if not facts.exists():
        return None
    path = tr.folder / "fstests" / Path(json.loads(facts.read_text())["test"]).name
    return path if path.exists() else None


def message(tr: Triaged) -> EmailMessage:
    m = EmailMessage()
    m["To"] = LISTS.get(tr.target.fs.type, FALLBACK)
    m["Subject"] = subject(tr)
    m["Date"] = formatdate(localtime=False)
    text = body(tr)
    # Lists read mail as it is: 7bit (8bit past ASCII), never quoted-printable.
    m.set_content(text, cte="7bit" if text.isascii() else "8bit")
    attach = [tr.folder / "slice.log", tr.folder / "replay.sh"]
    test = _fstests_test(tr)
    if test is not None:
        attach += [test, test.with_name(test.name + ".out")]
    for p in attach:
        if not p.exists():
            continue
        if p.suffix == ".log":
            m.add_attachment(
                p.read_bytes(), maintype="application", subtype="octet-stream", filename=p.name
            )
        else:
            m.add_attachment(p.read_text(), subtype="plain", filename=p.name)
    return m


def write(tr: Triaged) -> Path:
    """``report.eml`` in the report folder; its path."""
    out = tr.folder / "report.eml"
    out.write_bytes(bytes(message(tr)))
    return out
