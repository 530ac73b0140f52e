"""``zdb`` on the host: the userspace read of a crash state's pool, beside the guest's import.

``zdb -e -p DIR`` opens an exported pool from the image files in DIR with OpenZFS's own
userspace copy of the kernel code (libzpool), read-only, so it runs on the host like the
other filesystems' checkers (the host kernel has no ZFS). ``-bcc`` traverses every block
of the pool, verifies every checksum and accounts the space (a leak or a double
allocation is reported). A pool cut at a transaction-group boundary is consistent by
design, so on an honest crash state zdb should find nothing.

The guest's import, scrub and oracle stay the state's verdict: zdb's result is stored
beside it as the host-stage check, and a state where the two disagree is counted in the
run summary (``zdb_disagreements``) for a researcher to look at, never folded into the
verdict, because zdb reads without the kernel's recovery (no ZIL replay, no ``-F``).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import proc
from harness.errors import CommandTimeout
from harness.experiments.zfs.pool import POOL

ARGV = ("zdb", "-e", "-bcc")


@dataclass(frozen=True)
class ZdbCheck:
    ok: bool
    exitcode: int
    seconds: float
    output: str

    @property
    def checker(self) -> str:
        return " ".join(ARGV)


def check(images: Sequence[Path], workdir: Path, timeout: float) -> ZdbCheck:
    """zdb of the pool on ``images``, which are read, never written. ``workdir`` holds
    links to this state's images only (others' would be the same pool, other txgs)."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    for k, img in enumerate(images):
        (workdir / f"d{k}").symlink_to(img.resolve())
    t = time.monotonic()
    try:
        r = proc.run([*ARGV, "-p", workdir, POOL], check=False, timeout=timeout)
    except CommandTimeout as e:
        return ZdbCheck(False, -1, time.monotonic() - t, f"zdb: {e.message}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = (r.stdout + r.stderr).strip()
    return ZdbCheck(r.ok, r.returncode, r.seconds, summarize(text))


def summarize(text: str, limit: int = 3000) -> str:
    """What a reader needs of zdb's output: its error lines first, then its tail."""
    lines = text.splitlines()
    errors = [x for x in lines if _is_error(x)]
    head = "\n".join(errors[:40])
    tail = "\n".join(lines[-30:])
    return (head + "\n...\n" + tail if head else tail)[-limit:]


def _is_error(line: str) -> bool:
    low = line.lower()
    return any(w in low for w in ("error", "leaked", "checksum mismatch", "assert", "failed"))
