"""The host check of a filesystem whose journal or log is on a device of its own
(``fs.devices = 2``): the checker is given both images (e2fsck ``-j``, xfs_repair
``-l``), on sparse copies of both, so the states stay as they were.

ext3/ext4: ``e2fsck -p -j LOG`` replays the external journal first (as the internal
journal's replay does in ``host.py``: preen stops at anything but a sound journal), then
``e2fsck -f -n``; damage found is repaired with ``-f -y`` on the copies and checked again.
xfs: ``xfs_repair -n -l LOG -f``; a dirty log is the guest mount's to replay (skipped
here, as for an internal log).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from harness import filesystems, proc
from harness.check.host import (
    EXCERPT,
    EXT,
    CheckResult,
    Runner,
    copy_image,
    e2fsck_operational,
    excerpt,
)
from harness.errors import CommandTimeout, HarnessError
from harness.outcome import Outcome


def host_check(
    fs: str, image: Path, image2: Path, scratch: Path, *, timeout: float | None = None
) -> CheckResult:
    """Check the pair ``image`` + ``image2`` in userspace; neither is changed."""
    scratch.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    spec = filesystems.get(fs)
    if spec.second_device is None or spec.second_device.check_flags is None:
        return CheckResult(
            "host", spec.checker, Outcome.SKIPPED, None, 0.0,
            note=f"{spec.checker} finds the second device by scanning: judged in the guest",
        )  # fmt: skip
    try:
        with _copies(scratch, image, image2) as (img, log):
            return _check(spec, img, log, functools.partial(proc.run, check=False, timeout=timeout))
    except HarnessError as e:
        outcome = Outcome.TIMEOUT if isinstance(e, CommandTimeout) else Outcome.HARNESS_ERROR
        return CheckResult(
            "host", spec.checker, outcome, None, time.monotonic() - start, e.excerpt(EXCERPT)
        )


@contextlib.contextmanager
def _copies(scratch: Path, *images: Path) -> Iterator[list[Path]]:
    tag = f"{os.getpid()}-{threading.get_ident()}"
    copies = [scratch / f"pair-{tag}-{i}.img" for i in range(len(images))]
    try:
        for src, dst in zip(images, copies, strict=True):
            copy_image(src, dst)
        yield copies
    finally:
        for c in copies:
            c.unlink(missing_ok=True)


def _check(spec: filesystems.Filesystem, img: Path, log: Path, run: Runner) -> CheckResult:
    assert spec.second_device is not None and spec.second_device.check_flags is not None
    flags = [f.format(dev=log) for f in spec.second_device.check_flags]
    phases: dict[str, float] = {}
    out: list[str] = []
    ext = spec.name in EXT
    if ext:
        j = run(["e2fsck", "-p", *flags, img])
        phases["journal_replay"] = j.seconds
        out.append(j.stdout + j.stderr)
        e2fsck_operational(j)
        if j.returncode >= 8:
            return CheckResult(
                "host", spec.checker, Outcome.UNREPAIRABLE, j.returncode, j.seconds,
                excerpt(out), phases, note="journal replay failed",
            )  # fmt: skip
    check = [*spec.on_file(spec.check), *flags, img]
    r = run(check)
    phases["fsck"] = r.seconds
    out.append(r.stdout + r.stderr)
    if ext:
        e2fsck_operational(r)
    if r.returncode == 0:
        outcome = Outcome.CONSISTENT
    elif spec.dirty_log and spec.dirty_log in out[-1]:
        return CheckResult(
            "host", spec.checker, Outcome.SKIPPED, r.returncode, r.seconds, excerpt(out),
            phases, note="dirty log: judged by the guest's mount",
        )  # fmt: skip
    else:
        rep = run([*spec.on_file(spec.repair), *flags, img])
        phases["repair"] = rep.seconds
        out.append(rep.stdout + rep.stderr)
        again = run(check) if rep.returncode in spec.repaired else None
        fixed = again is not None and again.returncode == 0
        outcome = Outcome.REPAIRED if fixed else Outcome.UNREPAIRABLE
    return CheckResult(
        "host", spec.checker, outcome, r.returncode, sum(phases.values()), excerpt(out), phases
    )
