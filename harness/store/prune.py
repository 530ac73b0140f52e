"""A disk budget for the lab (``scenario lab prune``, issue 48): the cache and the run
folders kept within a size the user sets, least recently used first.

What is counted: the kernel cache (one entry a release under test), the guest images,
and the run folders (each run's dm-log-writes log, oracle and recording). What may go,
oldest use first, until the total is within the budget:

- a kernel no unfinished campaign still names and no running run boots (its last use:
  the newest run that named it, else the entry's own time);
- an image that is not the current recipe's and no running run uses;
- a run folder of a finished run with no finding and no triage.

What never goes: the store (it is not counted), a running or resumable run's folder (it
resumes from it), a finding's log and triage folder, the current image, what a running
or unfinished campaign will boot. Run folders of runs this store does not know (another
store's, a test's) are counted and listed, never removed: whether they hold a finding is
that store's to say. A budget that cannot be met says by how much.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from harness import paths
from harness.config.settings import parse_size
from harness.errors import InputError
from harness.store.db import Store
from harness.store.model import RunRow, RunStatus

BUDGET_ENV = "CRASHLAB_DISK_BUDGET"


def budget(text: str | None) -> int:
    """The budget in bytes: ``text`` (``20G``), else ``$CRASHLAB_DISK_BUDGET``.

    :raise InputError: neither given, or not a size."""
    given = text if text is not None else os.environ.get(BUDGET_ENV)
    if not given:
        raise InputError("no disk budget", hint=f"--budget 20G, or {BUDGET_ENV}=20G")
    try:
        return parse_size(given)
    except ValueError as e:
        raise InputError(f"--budget {given!r}: {e}", hint="e.g. 20G, 500M") from None


@dataclass(frozen=True)
class Item:
    kind: str  # kernel, image, run
    path: Path
    size: int  # bytes on disk (a sparse log counts what it holds)
    used: float  # when it was last used, epoch seconds
    keep: str = ""  # why it never goes ("" if it may)

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "path": str(self.path), "size": self.size,
                "used": self.used, "keep": self.keep}  # fmt: skip


def disk_usage(path: Path) -> int:
    """Bytes ``path`` holds on disk (allocated blocks: the logs are sparse)."""
    if path.is_file():
        return path.stat().st_blocks * 512
    total = 0
    for top, _, files in os.walk(path):
        for f in files:
            with_stat = Path(top, f)
            if not with_stat.is_symlink():
                total += with_stat.stat().st_blocks * 512
    return total


def human(n: int) -> str:
    """A size to read, not to parse back: 1.4G, 419M, 12K."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f}{unit}" if unit == "G" else f"{n >> shift}{unit}"
    return f"{n}B"


def usage() -> dict[str, int]:
    """Bytes on disk of each kind the budget counts (no store needed: ``doctor``)."""
    roots = {"kernels": paths.cache_dir() / "kernels", "images": paths.images_dir(),
             "run folders": paths.work_dir() / "runs"}  # fmt: skip
    return {k: disk_usage(d) if d.is_dir() else 0 for k, d in roots.items()}


def _when(stamp: str | None) -> float:
    return datetime.fromisoformat(stamp).timestamp() if stamp else 0.0


def survey(store: Store, current_image: str) -> list[Item]:
    """Every kernel, image and run folder, with its size, last use and why it stays."""
    runs = store.runs(None)
    live = [r for r in runs if r.status is RunStatus.RUNNING]
    needed = {o.split("=", 1)[1] for ov in store.pending_overrides() for o in ov
              if o.startswith("kernel=")}  # fmt: skip
    return [
        *_kernels(runs, live, needed),
        *_images(runs, live, current_image),
        *_run_folders(runs, store),
    ]


def _kernel_of(r: RunRow) -> str:
    return str(r.params.get("kernel") or r.guest_kernel or "")


def _kernels(runs: Sequence[RunRow], live: Sequence[RunRow], needed: set[str]) -> list[Item]:
    root = paths.cache_dir() / "kernels"
    if not root.is_dir():
        return []
    booting = {_kernel_of(r) for r in live}
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        used = max((_when(r.started_at) for r in runs if _kernel_of(r) == d.name),
                   default=d.stat().st_mtime)  # fmt: skip
        keep = ("a running run boots it" if d.name in booting
                else "an unfinished campaign names it" if d.name in needed else "")  # fmt: skip
        out.append(Item("kernel", d, disk_usage(d), used, keep))
    return out


def _images(runs: Sequence[RunRow], live: Sequence[RunRow], current: str) -> list[Item]:
    root = paths.images_dir()
    if not root.is_dir():
        return []
    in_use = {r.image_hash for r in live}
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        used = max((_when(r.started_at) for r in runs if r.image_hash == d.name),
                   default=d.stat().st_mtime)  # fmt: skip
        keep = ("the current recipe's image" if d.name == current
                else "a running run uses it" if d.name in in_use else "")  # fmt: skip
        out.append(Item("image", d, disk_usage(d), used, keep))
    return out


def _run_folders(runs: Sequence[RunRow], store: Store) -> list[Item]:
    root = paths.work_dir() / "runs"
    if not root.is_dir():
        return []
    known = {r.id: r for r in runs}
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        r = known.get(d.name)
        if r is None:
            out.append(Item("run", d, disk_usage(d), d.stat().st_mtime,
                            f"not a run of {store.path.name}"))  # fmt: skip
            continue
        keep = (
            "running" if r.status is RunStatus.RUNNING
            else "resumable" if r.status is RunStatus.INTERRUPTED
            else "triaged" if (d / "triage").is_dir()
            else "a finding" if r.account.findings
            else ""
        )  # fmt: skip
        out.append(Item("run", d, disk_usage(d), _when(r.finished_at or r.started_at), keep))
    return out


def plan(items: Iterable[Item], budget: int) -> tuple[list[Item], int]:
    """What goes (least recently used first) to bring the total within ``budget``, and
    the total after it."""
    items = list(items)
    total = sum(i.size for i in items)
    out = []
    for i in sorted((i for i in items if not i.keep), key=lambda i: i.used):
        if total <= budget:
            break
        out.append(i)
        total -= i.size
    return out, total


def remove(items: Iterable[Item]) -> None:
    for i in items:
        shutil.rmtree(i.path, ignore_errors=False)
