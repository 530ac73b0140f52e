"""Judging one crash image with the filesystem's own userspace checker, on the host.

``host_check(fs, image, scratch)`` is a pure function of a crash image: it leaves the image
exactly as it found it (what an ext journal replay writes is saved first and put back,
``extjournal``; xfs_repair -n and btrfs check --readonly write nothing; a repair attempt
runs on a sparse copy), so checks can run anywhere — a second core, or later a Dask
worker — given the state and its image.
Nothing here mounts anything: the host kernel never sees a crash image.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness import filesystems, proc, tools
from harness.check import extjournal
from harness.errors import CommandTimeout, HarnessError, ToolMissing
from harness.outcome import Outcome
from harness.replay.changes import Changes

EXT = ("ext2", "ext3", "ext4")
EXCERPT = 1500


@dataclass(frozen=True)
class CheckResult:
    stage: str  # "host" or "guest"
    checker: str
    outcome: Outcome
    exit_status: int | None
    seconds: float
    output: str = ""
    # Recovery phases, seconds: journal_replay, fsck, repair, mount, umount, fsck_after.
    phases: dict[str, float] = field(default_factory=dict)
    note: str = ""
    # Application patterns (harness/guest/apppat.py): what the state left of each target.
    classes: list[dict[str, Any]] = field(default_factory=list)
    # The guest oracle's guarantee profile the state was judged by, and the weakest
    # promise a failed requirement broke (harness/check/promises.py); "" where none.
    profile: str = ""
    promise: str = ""
    rule: str = ""  # the oracle rule a data_loss broke (promises.rule_of), read from the note


# e2fsck's exit bits that say the lab, not the filesystem, failed: usage error, cancelled,
# shared-library error. Exit 8 ("operational error") is also what a crash image with a
# destroyed superblock gets, so it is a finding unless the output says the image could
# not even be opened.
E2FSCK_HARNESS_BITS = 16 | 32 | 128
E2FSCK_CANNOT_OPEN = ("No such file or directory", "Permission denied", "Device or resource busy")


def require_checker(fs: str) -> None:
    """The host checker of ``fs`` (check, repair, log replay) is installed: without it every
    host check would be a harness error, state by state, and a run could still pass on its
    guest checks alone -- so the run stops before a guest boots, naming the package.

    :raise ToolMissing: a program of the checker, with its Debian package.
    """
    known = filesystems.get(fs)
    for argv in (known.check, known.repair, known.replay):
        if argv and not tools.available(argv[0]):
            raise ToolMissing(argv[0], known.package)


@functools.cache
def checker_version(fs: str) -> str:
    """The first line the host checker of ``fs`` prints about its version ("e2fsck
    1.47.0 (5-Feb-2023)"): part of what a host verdict depends on. "" for a filesystem
    without a host checker; "missing" when the checker is not installed (its checks are
    harness errors, which are never reused)."""
    known = filesystems.FILESYSTEMS.get(fs)
    if known is None or not known.version:
        return ""
    argv = list(known.version)
    try:
        r = proc.run(argv, check=False, timeout=30)
    except HarnessError:  # not installed, or hung: no verdict will depend on it
        return "missing"
    line = ((r.stdout.strip() or r.stderr.strip()).splitlines() or ["?"])[0].strip()
    # The lab's build of a checker says the same version as Debian's, but verdicts of one
    # are not the other's (images/jfsutils).
    return f"{line} (lab build)" if tools.lab_built(tools.require(argv[0])) else line


def host_check(
    fs: str,
    image: Path,
    scratch: Path,
    *,
    timeout: float | None = None,
    changes: Changes | None = None,
) -> CheckResult:
    """Check ``image`` in userspace; ``scratch`` is a directory for undo files and copies.

    Each checker command gets ``timeout`` seconds: past it, the state's host check is the
    lab's ``timeout`` outcome (a hang), never a finding. ``changes``: when ``image`` is a
    Replayer's working image, its tracker (``rp.changes()``), so that what the check
    reads of one state is not read again for the next (``check.jbd2``).
    """
    scratch.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    run = functools.partial(proc.run, check=False, timeout=timeout)
    try:
        if fs in EXT:
            r = _check_ext(fs, image, scratch, run, changes)
        elif fs in filesystems.FILESYSTEMS:
            r = _check_other(filesystems.get(fs), image, scratch, run)
        else:
            raise HarnessError(f"no host checker for filesystem type {fs!r}")
    except HarnessError as e:
        return CheckResult(
            "host",
            fs,
            Outcome.TIMEOUT if isinstance(e, CommandTimeout) else Outcome.HARNESS_ERROR,
            None,
            time.monotonic() - start,
            e.excerpt(EXCERPT),
        )
    return r


Runner = extjournal.Runner


def _check_ext(
    fs: str, image: Path, scratch: Path, run: Runner, changes: Changes | None
) -> CheckResult:
    phases: dict[str, float] = {}
    out: list[str] = []
    with contextlib.ExitStack() as stack:
        if fs != "ext2":
            # e2fsck -fn exits 4 on an image whose journal needs recovery: replay it first;
            # the image is put back when the stack closes, also after a timeout, since the
            # working image is replayed incrementally for the next state.
            # -p, not -y: with a corrupt journal, -y "clears" it and restarts as a full
            # repair, so the read-only check after it would see a repaired image and call
            # a broken state consistent. Preen replays a sound journal and stops at
            # anything else.
            j = stack.enter_context(extjournal.replayed(image, scratch, run, changes))
            phases["journal_replay"] = j.seconds
            out.append(j.stdout + j.stderr)
            e2fsck_operational(j)
            if j.returncode >= 8:
                return CheckResult(
                    "host",
                    "e2fsck",
                    Outcome.UNREPAIRABLE,
                    j.returncode,
                    j.seconds,
                    excerpt(out),
                    phases,
                    note="journal replay failed",
                )
        f = run(["e2fsck", "-f", "-n", image])
        phases["fsck"] = f.seconds
        out.append(f.stdout + f.stderr)
        e2fsck_operational(f)
        if f.returncode == 0:
            outcome, status = Outcome.CONSISTENT, 0
        else:
            outcome, status, rep = _repair_copy(
                image, scratch, run, ["e2fsck", "-f", "-y"], ["e2fsck", "-f", "-n"], (0, 1, 2)
            )
            phases["repair"] = rep.seconds
            out.append(rep.stdout + rep.stderr)
            status = f.returncode
    return CheckResult(
        "host", "e2fsck", outcome, status, sum(phases.values()), excerpt(out), phases
    )


def e2fsck_operational(r: proc.Result) -> None:
    """Raise if e2fsck failed for the lab's reasons, not the image's.

    :raise HarnessError: usage error, cancelled, library error, or an image it could not
        open -- never a finding.
    """
    text = r.stdout + r.stderr
    if r.returncode & E2FSCK_HARNESS_BITS or (
        r.returncode & 8 and any(m in text for m in E2FSCK_CANNOT_OPEN)
    ):
        raise HarnessError(
            f"e2fsck failed to run (exit {r.returncode}): not a finding",
            detail="$ " + " ".join(r.argv) + "\n" + text[-EXCERPT:],
        )


def _check_other(
    fs: filesystems.Filesystem, image: Path, scratch: Path, run: Runner
) -> CheckResult:
    """The filesystem's read-only check; damage found, its repair on a copy. A checker
    that replays its log first gets a sparse copy of the state, never the state."""
    if not fs.on_copy:
        return _check_readonly(fs, image, scratch, run)
    copy = scratch / f"check-{os.getpid()}-{threading.get_ident()}.img"
    copy_image(image, copy)
    try:
        replayed = run([*fs.replay, copy]) if fs.replay else None
        r = _check_readonly(fs, copy, scratch, run)
    finally:
        copy.unlink(missing_ok=True)
    if replayed is None:
        return r
    return replace(
        r,
        seconds=r.seconds + replayed.seconds,
        phases={"journal_replay": replayed.seconds, **r.phases},
        output=excerpt([replayed.stdout + replayed.stderr, r.output]),
    )


def _check_readonly(
    fs: filesystems.Filesystem, image: Path, scratch: Path, run: Runner
) -> CheckResult:
    name, argv, dirty_log = fs.checker, [*fs.on_file(fs.check), image], fs.dirty_log
    r = run(argv)
    phases = {"fsck": r.seconds}
    text = r.stdout + r.stderr
    if r.returncode == 0:
        return CheckResult("host", name, Outcome.CONSISTENT, 0, r.seconds, excerpt([text]), phases)
    if dirty_log and dirty_log in text:
        # Not corruption: the log must be replayed by a mount, which only the guest does.
        return CheckResult(
            "host",
            name,
            Outcome.SKIPPED,
            r.returncode,
            r.seconds,
            excerpt([text]),
            phases,
            note="dirty log: judged by the guest's mount",
        )
    outcome, _, rep = _repair_copy(
        image, scratch, run, list(fs.repair), list(fs.check), fs.repaired
    )
    phases["repair"] = rep.seconds
    return CheckResult(
        "host",
        name,
        outcome,
        r.returncode,
        sum(phases.values()),
        excerpt([text, rep.stdout + rep.stderr]),
        phases,
    )


def _repair_copy(
    image: Path,
    scratch: Path,
    run: Runner,
    repair: list[str],
    recheck: list[str],
    ok_codes: tuple[int, ...],
) -> tuple[Outcome, int, proc.Result]:
    """Damage found: try the repair on a sparse copy and check the result read-only."""
    copy = scratch / "repair.img"
    proc.run(["cp", "--sparse=always", image, copy])
    try:
        rep = run([*repair, copy])
        if rep.returncode not in ok_codes:
            return Outcome.UNREPAIRABLE, rep.returncode, rep
        again = run([*recheck, copy])
        return (
            (Outcome.REPAIRED if again.returncode == 0 else Outcome.UNREPAIRABLE),
            rep.returncode,
            rep,
        )
    finally:
        copy.unlink(missing_ok=True)


def excerpt(parts: list[str]) -> str:
    return "\n".join(p.strip() for p in parts if p.strip())[-EXCERPT:]


def copy_image(src: Path, dst: Path) -> None:
    """A sparse copy (the host fs has no reflinks here; holes stay holes)."""
    proc.run(["cp", "--sparse=always", src, dst])
