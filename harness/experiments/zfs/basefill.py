"""Fill each cell once: every repetition of a scan starts from copies of the filled disks.

Filling dominates a repetition under TCG (38 s of a 70 s repetition at 256 MiB disks, and
it grows with the disk), while what the experiment measures is the scan. So the first
repetition of a cell that needs the fill makes the pool, fills it, exports it and keeps
the disk files in the run directory with the facts of the fill (``fill.json``, written
last, so a half-made base is never taken for a whole one); every repetition copies them
(sparse: only the written extents are read and written) and imports the pool. Every
repetition of a cell so scans the same bytes laid out the same way, which is what makes
the repetitions comparable; ``fill_once = false`` restores a fresh fill per repetition.
A resumed run reuses the bases it made.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from harness import proc
from harness.config.zfs import Cell, ZfsScenario
from harness.experiments.zfs import pool
from harness.vm.backend import Guest

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
    g: Guest, cell: Cell, disks: pool.DiskSet, seed: int, sc: ZfsScenario, phases: dict[str, float]
) -> Filled:
    """Create the cell's pool on ``disks`` and fill it to the cell's target."""
    t = time.monotonic()
    pool.run(g, pool.create_argv_for(g, cell, disks))
    used0, avail0 = pool.used_available(g)
    phases["create"] = time.monotonic() - t
    t = time.monotonic()
    target = int((used0 + avail0) * cell.fill / 100) - used0
    written = pool.fill(g, max(0, target), seed, timeout=sc.timeout)
    used, avail = pool.used_available(g)
    listed = pool.pool_list(g)
    phases["fill"] = time.monotonic() - t
    return Filled(used, avail, listed.alloc, written, dict(phases))


def base(sc: ZfsScenario, cell: Cell, directory: Path, seed: int) -> Filled:
    """The cell's filled disks in ``directory``: made now in a guest, or kept from before."""
    facts = directory / FACTS
    if facts.exists():
        return Filled(**json.loads(facts.read_text()))
    phases: dict[str, float] = {}
    disks = pool.make_disks(directory, cell, sc.fault, spares=False)
    with pool.guest(sc, disks, phases) as g:
        made = create_and_fill(g, cell, disks, seed, sc, phases)
        pool.run(g, ["zpool", "export", pool.POOL])
    made = Filled(**{**asdict(made), "seconds": phases, "directory": str(directory)})
    tmp = facts.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(made)))
    os.replace(tmp, facts)
    return made


def restore(filled: Filled, disks: pool.DiskSet) -> None:
    """Copy the kept disks over a repetition's fresh ones (spares stay blank)."""
    for d in disks.all():
        if d in disks.spares:
            continue
        kept = Path(filled.directory) / d.path.name
        proc.run(["cp", "--sparse=always", str(kept), str(d.path)])
