"""fstests' fsstress, the workload of generic/482, run in the recording guest.

Debian packages neither fstests nor fsstress, and the lab does not carry fstests' source
(GPL-2.0, another project's code): like fstests' ``_require_command``, the lab asks for it.
``scenario image fsstress XFSTESTS`` compiles ``ltp/fsstress.c`` of the user's xfstests
checkout once, statically (so it runs in any guest whatever its libc), into the cache;
each recording copies it into its guest. The guest image, and so its recipe hash, stays
as it is. A scenario may name another binary (``workload.binary``).

What generic/482 runs: ``fsstress -w -d $SCRATCH_MNT -n 512 -p $nr_cpus`` (nr_cpus capped
at 8; ``_scale_fsstress_args`` multiplies -n and -p by TIME_FACTOR and LOAD_FACTOR, both 1
by default). The lab adds ``-s SEED`` so a run names the op stream it drew; with more
than one process the interleaving, and so the log, still differs between recordings.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

from harness import paths, proc
from harness.errors import HarnessError, InputError

SOURCE = Path("ltp/fsstress.c")
# What xfstests' configure finds on a Debian 12 host with xfslibs-dev: fsstress.c and
# src/global.h include only through these (config.h itself is left empty). -DXFS turns on
# its XFS ioctls (it probes the filesystem and skips them elsewhere).
DEFINES = (
    "XFS", "FALLOCATE", "HAVE_XFS_XFS_H", "HAVE_SYS_TYPES_H", "HAVE_SYS_STAT_H",
    "HAVE_SYS_STATVFS_H", "HAVE_SYS_TIME_H", "HAVE_SYS_IOCTL_H", "HAVE_SYS_WAIT_H",
    "HAVE_MALLOC_H", "HAVE_DIRENT_H", "HAVE_STDLIB_H", "HAVE_UNISTD_H", "HAVE_ERRNO_H",
    "HAVE_STRING_H", "HAVE_TIME_H", "HAVE_SYS_PARAM_H", "HAVE_LIBGEN_H", "HAVE_ASSERT_H",
    "HAVE_STRINGS_H", "HAVE_LINUX_FALLOC_H", "HAVE_LINUX_FIEMAP_H", "HAVE_SYS_MMAN_H",
    "HAVE_SYS_PRCTL_H", "HAVE_COPY_FILE_RANGE", "HAVE_RENAMEAT2", "_GNU_SOURCE",
    "_FILE_OFFSET_BITS=64",
)  # fmt: skip
# generic/482 caps its process count at 8 "to avoid spending too much time".
MAX_PROCS = 8
BUILD_HINT = "build it once from an xfstests checkout: scenario image fsstress XFSTESTS_DIR"


def binary() -> Path:
    """Where ``scenario image fsstress`` puts the binary."""
    return paths.cache_dir() / "tools" / "fsstress"


def require(path: str = "") -> Path:
    """The fsstress binary a recording copies into its guest: ``path``, or the built one.

    :raise InputError: ``path`` names no file.
    :raise HarnessError: none was built; the hint says how.
    """
    if path:
        given = Path(path).expanduser()
        if not given.is_file():
            raise InputError(
                f"key 'workload.binary': no fsstress binary at {path!r}",
                hint=f"give a static fsstress built for x86_64, or leave it unset and {BUILD_HINT}",
            )
        return given
    built = binary()
    if not built.is_file():
        raise HarnessError(f"fsstress was not found at {built}", hint=BUILD_HINT)
    return built


def build(xfstests: Path, *, out: Path | None = None) -> dict[str, str]:
    """Compile ``xfstests/ltp/fsstress.c`` statically into ``out`` (default: the cache).

    Returns what was built from what (also kept beside the binary as ``fsstress.json``).

    :raise InputError: ``xfstests`` is not an xfstests checkout.
    :raise CommandFailed: gcc failed (xfslibs-dev missing, typically: its output says).
    """
    src = xfstests / SOURCE
    if not src.is_file():
        raise InputError(
            f"{xfstests}: no {SOURCE} here, so not an xfstests checkout",
            hint="git clone https://git.kernel.org/pub/scm/fs/xfs/xfstests-dev.git",
        )
    dest = out or binary()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as empty:
        (Path(empty) / "config.h").touch()
        proc.run(
            [
                "gcc", "-O2", "-static", "-w", f"-I{empty}",
                f"-I{xfstests / 'src'}", f"-I{xfstests / 'include'}",
                *(f"-D{d}" for d in DEFINES),
                str(src), "-o", str(dest), "-lm",
            ],
            timeout=600,
        )  # fmt: skip
    info = {
        "binary": str(dest),
        "source": str(src.resolve()),
        "source_sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
        "binary_sha256": digest(dest),
    }
    dest.with_suffix(".json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def digest(path: Path) -> str:
    """The binary's sha256: stored with each recording, so a run says which fsstress ran."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def argv(program: str, directory: str, *, ops: int, procs: int, seed: int) -> list[str]:
    """generic/482's fsstress command line, with the run's seed."""
    if ops < 1 or procs < 1:
        raise HarnessError(f"fsstress needs ops and procs >= 1 (got {ops}, {procs})")
    return [program, "-w", "-d", directory, "-n", str(ops), "-p", str(procs), "-s", str(seed)]


def procs_for(nr_cpus: int, procs: int | None) -> int:
    """``procs`` when given, else generic/482's choice: the CPUs, at most 8."""
    return procs if procs is not None else max(1, min(nr_cpus, MAX_PROCS))
