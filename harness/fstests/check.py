"""fstests' ``./check`` with chosen tests in one disposable lab guest on a chosen kernel.

1. Stages a built xfstests tree (``make`` in it first; Debian needs xfslibs-dev, uuid-dev,
   libacl1-dev, libattr1-dev, autoconf, automake, libtool) and the host's ``bc`` (the
   guest image has none and fstests' common/config requires it) onto an ext4 image made
   with ``mkfs.ext4 -d``: no host mount.
2. Boots one guest (``scenario vm run --udev [--kernel K]``, under the guest lock) with
   that disk, TEST_DEV, SCRATCH_DEV and LOGWRITES_DEV, and runs ``./check TEST...``
   unchanged (``guest.sh``).
3. Copies fstests' results off the image with ``debugfs rdump`` (no host mount).

Used by ``bench/fstests_482.py`` (generic/482, then check-log on its log) and by
``scenario triage --fstests`` (a generated test, proven on two kernels).
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness import paths, proc
from harness.errors import InputError

LOCK = "/tmp/crashlab-guest.lock"
GUEST_SCRIPT = Path(__file__).with_name("guest.sh")
# generic/482 makes a 200 MiB thin volume and dm-thin puts 80 MiB before the data on
# SCRATCH_DEV, so SCRATCH_DEV needs >= 280 MiB. TEST_DEV is made with FSTYP's own mkfs,
# and mkfs.xfs refuses less than 300 MiB (a 256M TEST_DEV left xfs tests unmountable).
SIZES = {"fst": "256M", "test": "320M", "scratch": "320M", "logwrites": "1G"}
# The binaries the dm tests run; a tree without them is not built.
BUILT = ("src/log-writes/replay-log", "ltp/fsstress", "ltp/fsx", "src/feature")
CLONE = "git clone git://git.kernel.org/pub/scm/fs/xfs/xfstests-dev.git"


@dataclass(frozen=True)
class Checked:
    """One ``./check`` run: fstests' verdict of each test, the guest's output."""

    kernel: str  # the release asked for ("" the image's)
    verdicts: dict[str, str]  # test -> passed / failed / not run / harness error
    exit_status: int
    seconds: float  # wall time, the guest lock's wait included
    output: str
    results: Path | None  # fstests' results folder, copied off the image

    def verdict(self, test: str) -> str:
        return self.verdicts.get(test, "harness error")


def require_checkout(xfstests: Path) -> None:
    """:raise InputError: ``xfstests`` is no fstests checkout (no ``check``)."""
    if not (xfstests / "check").is_file():
        raise InputError(
            f"{xfstests}: not an fstests (xfstests) checkout: it has no `check`",
            hint=f"get one: {CLONE}; then `make` in it (Debian: apt-get install xfslibs-dev "
            "uuid-dev libacl1-dev libattr1-dev autoconf automake libtool)",
        )


def stage(xfstests: Path, out: Path) -> Path:
    """The fstests disk image: the tree, the guest script, bc with the libraries it needs."""
    require_checkout(xfstests)
    missing = [b for b in BUILT if not (xfstests / b).exists()]
    if missing:
        raise InputError(
            f"{xfstests}: not built ({', '.join(missing)} missing)", hint="run make in it"
        )
    root = out / "stage"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(
        xfstests, root / "xfstests", symlinks=True, ignore=shutil.ignore_patterns(".git")
    )
    shutil.rmtree(root / "xfstests" / "results", ignore_errors=True)
    shutil.copy(GUEST_SCRIPT, root / GUEST_SCRIPT.name)
    (root / "bin").mkdir()
    (root / "lib").mkdir()
    bc = shutil.which("bc")
    if bc is None:
        raise InputError("bc is not installed on the host", hint="apt-get install bc")
    shutil.copy(bc, root / "lib" / "bc")
    # ldd's "name => path (addr)" lines: the libraries bc needs that the guest may lack.
    for m in re.finditer(r"=> (/\S+)", proc.run(["ldd", bc]).stdout):
        shutil.copy(m.group(1), root / "lib")
    wrapper = root / "bin" / "bc"
    wrapper.write_text('#!/bin/sh\nLD_LIBRARY_PATH=/fst/lib exec /fst/lib/bc "$@"\n')
    wrapper.chmod(0o755)
    img = out / "fst.img"
    img.unlink(missing_ok=True)
    proc.run(["mkfs.ext4", "-q", "-F", "-L", "fstests", "-d", root, img, SIZES["fst"]])
    return img


def fresh_disks(out: Path, test_fs: str = "ext4") -> dict[str, Path]:
    """TEST_DEV (ext4 made here; another filesystem is made by the guest script), sparse
    SCRATCH and LOGWRITES."""
    disks = {name: out / f"{name}.img" for name in ("test", "scratch", "logwrites")}
    for name, path in disks.items():
        path.unlink(missing_ok=True)
        proc.run(["truncate", "-s", SIZES[name], path])
    if test_fs == "ext4":
        proc.run(["mkfs.ext4", "-q", "-F", disks["test"]])
    return disks


def _verdicts(stdout: str, tests: list[str]) -> dict[str, str]:
    """check's summary lines: "Passed all N tests", "Failures: a b", "Not run: c"."""
    out: dict[str, str] = {}
    for label, verdict in (("Not run:", "not run"), ("Failures:", "failed")):
        for line in stdout.splitlines():
            if line.startswith(label):
                out |= dict.fromkeys(line[len(label) :].split(), verdict)
    ran = re.search(r"Passed all \d+ tests", stdout) or "Ran:" in stdout
    for t in tests:
        if t not in out and ran:
            out[t] = "passed"
    return out


def run(
    fst: Path,
    disks: dict[str, Path],
    tests: list[str],
    *,
    fstyp: str,
    out: Path,
    kernel: str | None = None,
    timeout: float = 3600,
) -> Checked:
    """``./check TESTS`` in one guest on ``kernel`` (None: the image's); its output in
    ``out/guest.out``, fstests' results in ``out/fstests-results``."""
    inner = (
        "mkdir -p /fst && mount /dev/disk/by-id/virtio-disk0 /fst && "
        f"cp /fst/{GUEST_SCRIPT.name} /tmp/ && exec bash /tmp/{GUEST_SCRIPT.name} "
        + " ".join([fstyp, *tests])
    )
    # --udev: fstests' _dmsetup_create waits for the device with `udevadm wait`, which
    # without udevd in the guest never returns (seen: check sat in it for minutes).
    argv: list[str | Path] = [
        "flock", LOCK, sys.executable, "-m", "harness", "vm", "run", "--udev", "--disk", fst
    ]  # fmt: skip
    for name in ("test", "scratch", "logwrites"):
        argv += ["--disk", disks[name]]
    if kernel:
        argv += ["--kernel", kernel]
    argv += ["--timeout", str(timeout), "--", "sh", "-c", inner]
    start = time.monotonic()
    r = proc.run(argv, check=False, env={"PYTHONPATH": str(paths.REPO)}, timeout=timeout + 3600)
    wall = time.monotonic() - start
    (out / "guest.out").write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    res = out / "fstests-results"
    shutil.rmtree(res, ignore_errors=True)
    proc.run(["debugfs", "-R", f"rdump /xfstests/results {out}", fst], check=False)
    if (out / "results").exists():
        (out / "results").rename(res)
    return Checked(
        kernel or "",
        _verdicts(r.stdout, tests),
        r.returncode,
        round(wall, 1),
        r.stdout,
        res if res.exists() else None,
    )
