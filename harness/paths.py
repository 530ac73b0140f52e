"""Where the lab keeps things: the image cache outside the repo, results inside it."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def portable(path: Path) -> str:
    """``path`` relative to the checkout when it lies inside it: what is stored with a run,
    so the same scenario in a moved or second checkout is the same run (resume)."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def cache_dir() -> Path:
    """``$CRASHLAB_CACHE`` or ``$XDG_CACHE_HOME/crashlab`` (default ``~/.cache/crashlab``)."""
    env = os.environ
    return _cache_dir(env.get("CRASHLAB_CACHE"), env.get("XDG_CACHE_HOME"), env.get("HOME"))


# By the variables it reads, so a test or a user changing them is still obeyed: the
# lookup runs twice a host check (tools.require), and building the path cost 18 us.
@functools.lru_cache(maxsize=8)
def _cache_dir(crashlab: str | None, xdg: str | None, home: str | None) -> Path:
    if crashlab:
        return Path(crashlab)
    return Path(xdg or str(Path.home() / ".cache")) / "crashlab"


def images_dir() -> Path:
    return cache_dir() / "images"


def lab_bin() -> Path:
    """Host programs the lab built itself, found before the system's (tools.require):
    the image build's fsck.jfs (images/jfsutils: Debian 12's cannot replay a JFS log)."""
    return cache_dir() / "bin"


def recipe_dir() -> Path:
    return REPO / "images"


def scenarios_dir() -> Path:
    return Path(os.environ.get("CRASHLAB_SCENARIOS", REPO / "scenarios"))


def results_dir() -> Path:
    return Path(os.environ.get("CRASHLAB_RESULTS", REPO / "results"))


def default_db() -> Path:
    return results_dir() / "lab.sqlite"


def work_dir() -> Path:
    """Scratch space for crash images and guest disks: large, sparse, disposable."""
    d = Path(os.environ.get("CRASHLAB_WORK", cache_dir() / "work"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def run_dir(run_id: str) -> Path:
    """A run's working directory (recorded logs, batches), kept for a resume."""
    return work_dir() / "runs" / run_id


@contextmanager
def fast_scratch(run_dir: Path, need_bytes: int) -> Iterator[Path]:
    """Where a run's working crash image lives: tmpfs (/dev/shm) when it has room for
    ``need_bytes`` with a margin, else the run directory. e2fsck and e2undo fsync the
    image several times per state; on tmpfs that costs nothing (2x states/s measured)."""
    shm = Path("/dev/shm")
    try:
        st = os.statvfs(shm)
        room = st.f_bavail * st.f_frsize
    except OSError:
        room = 0
    if room > 4 * need_bytes and os.access(shm, os.W_OK | os.X_OK):
        d = shm / f"crashlab-{run_dir.name}"
    else:
        d = run_dir / "scratch-work"
    d.mkdir(parents=True, exist_ok=True)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
