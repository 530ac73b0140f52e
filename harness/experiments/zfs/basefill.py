"""Fill each cell once: every repetition of a scan starts from the filled disks.

Filling dominates a repetition under TCG (38 s of a 70 s repetition at 256 MiB disks, and
it grows with the disk), while what the experiment measures is the scan. So the first
repetition of a cell that needs the fill makes the pool and fills it up the ladder of
the run's fills of that pool (25, 50, 75 %: one fill to 75 % passes the others), exporting
at each level to keep the disk files in the run directory with the facts of the fill
(``fill.json``, written last, so a half-made base is never taken for a whole one). Every
repetition then runs on qcow2 overlays on the kept files (``restore``; a copy of a disk
the fault writes into) and imports the pool, so every repetition of a cell scans the
same bytes laid out the same way, which is what makes the repetitions comparable;
``fill_once = false`` makes a fresh fill per repetition. A resumed run reuses the bases
it made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from faults.disk import DiskFault, FaultKind, When
from harness import proc
from harness.experiments.zfs import kept, pool
from harness.experiments.zfs.cells import Cell
from harness.experiments.zfs.settings import ZfsScenario
from harness.vm.backend import Disk, Guest

FACTS = "fill.json"


@dataclass(frozen=True)
class Filled:
    """A filled pool: what it holds, and where its exported disks are kept."""

    used: int  # zfs used / available, bytes
    available: int
    alloc: int  # raw bytes allocated, parity included (zpool list)
    written: int
    seconds: dict[str, float]  # what making it cost (create, fill, ...), paid once
    directory: str = ""  # the kept disk files (empty: not kept, a fresh fill)


def create_and_fill(
    g: Guest, cell: Cell, disks: pool.DiskSet, sc: ZfsScenario, phases: dict[str, float]
) -> Filled:
    """Create the cell's pool on ``disks`` and fill it to the cell's target (from the
    fill source among ``disks``)."""
    t = time.monotonic()
    pool.run(g, pool.create_argv_for(g, cell, disks))
    used0, avail0 = pool.used_available(g)
    phases["create"] = time.monotonic() - t
    t = time.monotonic()
    target = int((used0 + avail0) * cell.fill / 100) - used0
    written = pool.fill(g, max(0, target), timeout=sc.timeout)
    used, avail = pool.used_available(g)
    listed = pool.pool_list(g)
    phases["fill"] = time.monotonic() - t
    return Filled(used, avail, listed.alloc, written, dict(phases))


def base(
    sc: ZfsScenario,
    ladder: Sequence[tuple[Cell, Path]],
    cell: Cell,
    seed: int,
    keeper: kept.KeptGuest | None = None,
) -> Filled:
    """``cell``'s filled disks. ``ladder`` is every fill of ``cell``'s pool in the run, in
    increasing order, each with its directory: the missing ones are made now, in one guest
    (``keeper``'s, else one of their own) that fills to each level in turn and keeps a
    copy of the disks at each (a 75 % fill passes 25 % and 50 % on its way, so the three
    cost what the 75 % one alone did)."""
    if not all((d / FACTS).exists() for _, d in ladder):
        _climb(sc, ladder, seed, keeper)
    [directory] = [d for c, d in ladder if c.fill == cell.fill]
    return Filled(**json.loads((directory / FACTS).read_text()))


def _climb(
    sc: ZfsScenario,
    ladder: Sequence[tuple[Cell, Path]],
    seed: int,
    keeper: kept.KeptGuest | None,
) -> None:
    """Fill one pool up the ladder, keeping the disks at every level not kept yet."""
    top = max(i for i, (_, d) in enumerate(ladder) if not (d / FACTS).exists())
    run_dir = ladder[0][1].parent
    work = run_dir / "fill-work"
    phases: dict[str, float] = {}
    # Through the host's cache: each level is copied as soon as it is exported, from
    # the page cache instead of the disk (the full sweep's copies: 103 s -> 68 s).
    disks = pool.make_disks(work, ladder[0][0], sc.fault, spares=False, host_cache=True)
    disks = dataclasses.replace(disks, source=pool.fill_source(run_dir, seed))
    with _climbing(sc, disks, phases, keeper) as g:
        t = time.monotonic()
        pool.run(g, pool.create_argv_for(g, ladder[0][0], disks))
        used0, avail0 = pool.used_available(g)
        phases["create"] = time.monotonic() - t
        written = 0
        for k, (cell, directory) in enumerate(ladder[: top + 1]):
            t = time.monotonic()
            target = int((used0 + avail0) * cell.fill / 100) - used0 - written
            written += pool.fill(g, max(0, target), timeout=sc.timeout, name=f"fill{k}")
            used, avail = pool.used_available(g)
            listed = pool.pool_list(g)
            # boot, module and create are paid once, by the ladder's first level
            cost = {**(phases if k == 0 else {}), "fill": time.monotonic() - t}
            if (directory / FACTS).exists():
                continue
            t = time.monotonic()
            pool.run(g, ["zpool", "export", pool.POOL])
            _keep(disks, directory)
            pool.run(g, pool.import_argv())
            cost["keep"] = time.monotonic() - t
            made = Filled(used, avail, listed.alloc, written, cost, str(directory))
            tmp = directory / (FACTS + ".tmp")
            tmp.write_text(json.dumps(asdict(made)))
            os.replace(tmp, directory / FACTS)
    shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _climbing(
    sc: ZfsScenario,
    disks: pool.DiskSet,
    phases: dict[str, float],
    keeper: kept.KeptGuest | None,
) -> Iterator[Guest]:
    """The guest a ladder is filled in: ``keeper``'s with the disks plugged in (and out
    again after), or one booted with them."""
    if keeper is None:
        with pool.guest(sc, disks.all(), phases) as g:
            yield g
        return
    g = keeper.plug(disks, phases)
    ok = False
    try:
        yield g
        ok = True
    finally:
        keeper.release(ok=ok)


def _keep(disks: pool.DiskSet, directory: Path) -> None:
    """Copy the (exported) pool's disk files into ``directory``, sparsely."""
    directory.mkdir(parents=True, exist_ok=True)
    for d in disks.pool():
        proc.run(["cp", "--sparse=always", str(d.path), str(directory / d.path.name)])


def restore(filled: Filled, disks: pool.DiskSet, fault: DiskFault) -> pool.DiskSet:
    """A repetition's disks (fresh from ``make_disks``) made the kept fill's again.

    A disk the fault leaves alone becomes a qcow2 overlay on its kept file: made in
    milliseconds, and the kept file is never written. A disk the fault damages is a copy
    (faults write raw files), except one an offline wipe would empty anyway, which stays
    blank. Spares stay blank.
    """
    damaged = {disks.data[i].serial for i in fault.disks}
    blank = fault.kind is FaultKind.WIPE and fault.when is When.OFFLINE

    def one(d: Disk) -> Disk:
        kept_file = Path(filled.directory) / d.path.name
        if d.serial not in damaged:
            overlay = d.path.with_suffix(".qcow2")
            argv = ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw"]
            proc.run([*argv, "-b", str(kept_file), str(overlay)])
            d.path.unlink()
            return dataclasses.replace(d, path=overlay, format="qcow2")
        if not blank:
            proc.run(["cp", "--sparse=always", str(kept_file), str(d.path)])
        return d

    return dataclasses.replace(
        disks,
        data=tuple(one(d) for d in disks.data),
        cache=one(disks.cache) if disks.cache else None,
        log=one(disks.log) if disks.log else None,
    )
