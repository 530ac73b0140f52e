"""Timed userspace checks of a whole filesystem image, on the host, for recovery-time
tables: the full read-only check (``e2fsck -f -n -tt``, ``xfs_repair -n``,
``btrfs check --readonly``) and, for ext, the full repair ``e2fsck -f -y -tt`` on a
sparse copy (the crash image itself stays as it was). ``e2fsck -tt`` prints each pass's
time and the inodes and blocks it checked; they are parsed, never estimated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import filesystems, proc

EXT = ("ext2", "ext3", "ext4")
EXCERPT = 1500

# "Pass 1: Memory used: 216k/0k (81k/136k), time:  0.00/ 0.00/ 0.00" (real/user/sys)
_PASS = re.compile(r"^Pass (\d[A-Za-z]?): Memory used: .*time:\s*([\d.]+)/", re.M)
_TOTAL = re.compile(r"^Memory used: .*time:\s*([\d.]+)/", re.M)
# "img: 11/65536 files (0.0% non-contiguous), 12955/262144 blocks"
_COUNTS = re.compile(r": (\d+)/(\d+) files \([\d.]+% non-contiguous\), (\d+)/(\d+) blocks")


@dataclass(frozen=True)
class Timed:
    checker: str
    returncode: int | None
    seconds: float
    stats: dict[str, Any] = field(default_factory=dict)  # e2fsck -tt: passes, counts
    output: str = ""

    @property
    def clean(self) -> bool:
        return self.returncode == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "checker": self.checker,
            "rc": self.returncode,
            "seconds": round(self.seconds, 4),
            **self.stats,
            "output": self.output,
        }


def parse_e2fsck_tt(text: str) -> dict[str, Any]:
    """Pass times (real seconds), the total, and inodes/blocks in use out of the total,
    as ``e2fsck -tt`` prints them; keys are missing when it did not print them."""
    out: dict[str, Any] = {}
    passes: dict[str, float] = {}
    for name, real in _PASS.findall(text):
        passes[name] = float(real)  # the last line of a pass wins (e2fsck may restart)
    if passes:
        out["passes"] = passes
    total = _TOTAL.findall(text)
    if total:
        out["e2fsck_seconds"] = float(total[-1])
    counts = _COUNTS.findall(text)
    if counts:
        iu, it, bu, bt = (int(v) for v in counts[-1])
        out |= {"inodes_checked": iu, "inodes_total": it, "blocks_used": bu, "blocks_total": bt}
    return out


def check_argv(fs: str, image: Path) -> list[str]:
    """The full read-only check of ``fs``; it writes nothing."""
    if fs in EXT:
        return ["e2fsck", "-f", "-n", "-tt", str(image)]  # -tt: per-pass times
    known = filesystems.get(fs)
    return [*known.on_file(known.check), str(image)]


def full_check(fs: str, image: Path, *, timeout: float) -> Timed:
    """Time the full read-only check of ``image``.

    :raise HarnessError: the checker is missing, or hung past ``timeout``.
    """
    r = proc.run(check_argv(fs, image), check=False, timeout=timeout)
    return _timed(r)


def full_repair_copy(image: Path, scratch: Path, *, timeout: float) -> tuple[Timed, float]:
    """ext: ``e2fsck -f -y -tt`` (journal replay in userspace, then every pass) on a sparse
    copy of ``image``; the result and the seconds the copy took.

    :raise HarnessError: missing tool, a hang, a copy that failed.
    """
    copy = scratch / f"{image.stem}.repair.img"
    try:
        c = proc.run(["cp", "--sparse=always", image, copy], timeout=timeout)
        r = proc.run(["e2fsck", "-f", "-y", "-tt", copy], check=False, timeout=timeout)
        return _timed(r), c.seconds
    finally:
        copy.unlink(missing_ok=True)


def _timed(r: proc.Result) -> Timed:
    text = r.stdout + r.stderr
    stats = parse_e2fsck_tt(text) if r.argv[0] == "e2fsck" else {}
    name = " ".join(a for a in r.argv[:-1] if a != "-tt")
    return Timed(name, r.returncode, r.seconds, stats, text.strip()[-EXCERPT:])
