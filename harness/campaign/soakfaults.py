"""The faults of a soak (``harness/campaign/soak.py``), each done to the real thing: the
harness killed with SIGKILL, the cache's filesystem filled, a Dask worker killed while it
runs a guest, a kernel the Debian archive does not serve, a kept log's bytes overwritten,
the system clock moved.

Between nights: ``corrupt-log``, ``kernel-gone``. During a night, at a seeded moment:
``kill``, ``full-cache``, ``dask-worker``, ``clock``.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from harness import proc
from harness.errors import InputError

BETWEEN = ("corrupt-log", "kernel-gone")
DURING = ("kill", "full-cache", "dask-worker", "clock")
FAULTS = (*DURING, *BETWEEN)
# A kernel release no Debian suite has: its package is what "the registry no longer
# serves" looks like to the lab (apt finds no such package).
GONE_KERNEL = "6.1.0-999-amd64"
CLOCK_JUMP = 2 * 3600  # seconds the clock moves forward during a night, and back after
BALLAST = ".soak-ballast"


def check(faults: list[str]) -> list[str]:
    """:raise InputError: a fault the soak does not know, or one this host cannot do."""
    for f in faults:
        if f not in FAULTS:
            raise InputError(f"--faults: unknown fault {f!r}", hint="faults: " + ", ".join(FAULTS))
    if "clock" in faults and os.geteuid() != 0:
        raise InputError("--faults clock: moving the system clock needs root", hint="drop clock")
    return faults


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return []


def kill_harness(pid: int) -> str:
    """SIGKILL the campaign's whole process group (its guests die with it)."""
    os.killpg(pid, signal.SIGKILL)
    return f"kill -9 of the harness (pid {pid})"


def kill_busy_worker(pid: int) -> str | None:
    """SIGKILL a Dask worker that is running a guest; None when none is (yet)."""
    for p in descendants(pid):
        with contextlib.suppress(psutil.Error):  # it ended while we looked
            if p.name().startswith("qemu"):
                worker = p.parent()
                while worker is not None and "python" not in worker.name():
                    worker = worker.parent()
                if worker is not None and worker.pid != pid:
                    worker.kill()
                    return f"kill -9 of a Dask worker (pid {worker.pid}) running a guest"
    return None


def fill(cache: Path) -> Path:
    """Fill the filesystem of ``cache`` with one file; its path (remove it to undo)."""
    ballast = cache / BALLAST
    free = os.statvfs(cache).f_bavail * os.statvfs(cache).f_frsize
    proc.run(["fallocate", "-l", str(max(free, 4096)), str(ballast)], check=False)
    return ballast


def jump_clock(seconds: int) -> str:
    """Move the system clock by ``seconds`` (root)."""
    proc.run(["date", "-s", f"@{int(time.time()) + seconds}"])
    return f"clock moved {seconds:+d} s"


def corrupt_kept_log(runs: Path, rng: random.Random) -> str | None:
    """Overwrite the header of one kept dm-log-writes log of an earlier night."""
    logs = sorted(runs.glob("*/log.raw"))
    if not logs:
        return None
    victim = rng.choice(logs)
    with victim.open("r+b") as f:
        f.write(rng.randbytes(4096))
    return f"corrupted {victim}"


def gone_element(campaign_text: str, scenario: str) -> str:
    """The campaign with one more element, on a kernel the archive does not serve."""
    return campaign_text + (
        f'\n[[run]]\nscenario = "{scenario}"\nset = ["kernel={GONE_KERNEL}", "workload.ops=5"]\n'
    )


def moments(rng: random.Random, faults: list[str], expect: float) -> Iterator[tuple[float, str]]:
    """When each during-night fault fires: seeded, within the night's expected length."""
    for f in faults:
        if f in DURING:
            yield rng.uniform(0.15, 0.6) * expect, f
