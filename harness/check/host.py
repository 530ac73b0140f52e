"""Judging one crash image with the filesystem's own userspace checker, on the host.

``host_check(fs, image, scratch)`` is a pure function of a crash image: it leaves the image
exactly as it found it (ext journal replay is undone with e2undo; xfs_repair -n and
btrfs check --readonly write nothing; a repair attempt runs on a sparse copy), so checks
can run anywhere — a second core, or later a Dask worker — given the state and its image.
Nothing here mounts anything: the host kernel never sees a crash image.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import proc
from harness.errors import HarnessError
from harness.outcome import Outcome

EXT = ("ext2", "ext3", "ext4")
EXCERPT = 1500
# e2fsck -z fsyncs its undo file five times per check (e2fsprogs 1.47): in a scratch
# directory on disk that costs more than the check itself (bench/README.md), on a tmpfs
# nothing. The file holds only what the journal replay overwrote and lives for one check.
UNDO_DIR = Path("/dev/shm")


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


def host_check(fs: str, image: Path, scratch: Path) -> CheckResult:
    """Check ``image`` in userspace; ``scratch`` is a directory for undo files and copies."""
    scratch.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    try:
        if fs in EXT:
            r = _check_ext(fs, image, scratch)
        elif fs == "xfs":
            r = _check_readonly(
                "xfs_repair -n",
                ["xfs_repair", "-n", "-f", image],
                image,
                scratch,
                repair=["xfs_repair", "-f"],
                dirty_log="metadata changes in a log",
            )
        elif fs == "btrfs":
            r = _check_readonly(
                "btrfs check",
                ["btrfs", "check", "--readonly", image],
                image,
                scratch,
                repair=["btrfs", "check", "--repair", "--force"],
                dirty_log=None,
            )
        else:
            raise HarnessError(f"no host checker for filesystem type {fs!r}")
    except HarnessError as e:
        return CheckResult(
            "host",
            fs,
            Outcome.HARNESS_ERROR,
            None,
            time.monotonic() - start,
            f"{e.message}\n{e.detail or ''}"[-EXCERPT:],
        )
    return r


def _check_ext(fs: str, image: Path, scratch: Path) -> CheckResult:
    phases: dict[str, float] = {}
    out: list[str] = []
    undo = _undo_file(scratch)
    undo.unlink(missing_ok=True)
    if fs != "ext2":
        # e2fsck -fn exits 4 on an image whose journal needs recovery: replay it first,
        # recording what it overwrites so the image can be put back.
        # -p, not -y: with a corrupt journal, -y "clears" it and restarts as a full
        # repair, so the read-only check after it would see a repaired image and call a
        # broken state consistent. Preen replays a sound journal and stops at anything else.
        j = proc.run(["e2fsck", "-E", "journal_only", "-p", "-z", undo, image], check=False)
        phases["journal_replay"] = j.seconds
        out.append(j.stdout + j.stderr)
        if j.returncode >= 8:
            _undo(undo, image)
            return CheckResult(
                "host",
                "e2fsck",
                Outcome.UNREPAIRABLE,
                j.returncode,
                j.seconds,
                _excerpt(out),
                phases,
                note="journal replay failed",
            )
    try:
        f = proc.run(["e2fsck", "-f", "-n", image], check=False)
        phases["fsck"] = f.seconds
        out.append(f.stdout + f.stderr)
        if f.returncode == 0:
            outcome, status = Outcome.CONSISTENT, 0
        else:
            outcome, status, rep = _repair_copy(
                image, scratch, ["e2fsck", "-f", "-y"], ["e2fsck", "-f", "-n"], ok_codes=(0, 1, 2)
            )
            phases["repair"] = rep.seconds
            out.append(rep.stdout + rep.stderr)
            status = f.returncode
    finally:
        _undo(undo, image)
    return CheckResult(
        "host", "e2fsck", outcome, status, sum(phases.values()), _excerpt(out), phases
    )


def _check_readonly(
    name: str,
    argv: list[str | Path],
    image: Path,
    scratch: Path,
    *,
    repair: list[str],
    dirty_log: str | None,
) -> CheckResult:
    r = proc.run(argv, check=False)
    phases = {"fsck": r.seconds}
    text = r.stdout + r.stderr
    if r.returncode == 0:
        return CheckResult("host", name, Outcome.CONSISTENT, 0, r.seconds, _excerpt([text]), phases)
    if dirty_log and dirty_log in text:
        # Not corruption: the log must be replayed by a mount, which only the guest does.
        return CheckResult(
            "host",
            name,
            Outcome.SKIPPED,
            r.returncode,
            r.seconds,
            _excerpt([text]),
            phases,
            note="dirty log: judged by the guest's mount",
        )
    outcome, _, rep = _repair_copy(
        image, scratch, repair, [str(a) for a in argv[:-1]], ok_codes=(0,)
    )
    phases["repair"] = rep.seconds
    return CheckResult(
        "host",
        name,
        outcome,
        r.returncode,
        sum(phases.values()),
        _excerpt([text, rep.stdout + rep.stderr]),
        phases,
    )


def _repair_copy(
    image: Path, scratch: Path, repair: list[str], recheck: list[str], ok_codes: tuple[int, ...]
) -> tuple[Outcome, int, proc.Result]:
    """Damage found: try the repair on a sparse copy and check the result read-only."""
    copy = scratch / "repair.img"
    proc.run(["cp", "--sparse=always", image, copy])
    try:
        rep = proc.run([*repair, copy], check=False)
        if rep.returncode not in ok_codes:
            return Outcome.UNREPAIRABLE, rep.returncode, rep
        again = proc.run([*recheck, copy], check=False)
        return (
            (Outcome.REPAIRED if again.returncode == 0 else Outcome.UNREPAIRABLE),
            rep.returncode,
            rep,
        )
    finally:
        copy.unlink(missing_ok=True)


def _undo_file(scratch: Path) -> Path:
    """A name no other check running now uses (workers may share a scratch directory)."""
    name = f"crashlab-{os.getpid()}-{threading.get_ident()}.e2undo"
    if UNDO_DIR.is_dir() and os.access(UNDO_DIR, os.W_OK | os.X_OK):
        return UNDO_DIR / name
    return scratch / name


def _undo(undo: Path, image: Path) -> None:
    if undo.exists() and undo.stat().st_size > 0:
        proc.run(["e2undo", undo, image])
    undo.unlink(missing_ok=True)


def _excerpt(parts: list[str]) -> str:
    return "\n".join(p.strip() for p in parts if p.strip())[-EXCERPT:]


def copy_image(src: Path, dst: Path) -> None:
    """A sparse copy (the host fs has no reflinks here; holes stay holes)."""
    proc.run(["cp", "--sparse=always", src, dst])
