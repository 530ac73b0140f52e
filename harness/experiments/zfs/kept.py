"""One guest kept across the repetitions of a sweep: export, restore the disks, import.

With the cells filled once (``basefill``) a repetition's fixed cost is mostly the guest's
boot under TCG (10-22 s here, against a 5-35 s scan at 1 GiB disks). Repetitions whose
disks are the same files (every cell of a sweep over layouts and fills: same count and
size of disks) so run in one guest: at the end of a repetition the pool is exported, the
host copies the next repetition's filled disks over the same files (the same inodes, so
QEMU sees the new contents), and the guest drops what it cached of the old ones (the
buffer cache ``zpool import`` reads labels through, and the partition tables) before
importing. What could leak between repetitions does not: export evicts the pool from the
ARC, the event queue is cleared before each fault, the spare disks are blank again.
A repetition that fails throws its guest away: the next one boots a fresh guest.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

from harness.config.zfs import ZfsScenario
from harness.errors import HarnessError
from harness.experiments.zfs import pool
from harness.vm.backend import Guest

log = logging.getLogger("crashlab.zfs")


class KeptGuest:
    """The guest of the last repetition, while the next one's disks are the same files."""

    def __init__(self, sc: ZfsScenario):
        self.sc = sc
        self._stack = contextlib.ExitStack()
        self._guest: Guest | None = None
        self._key: tuple[tuple[str, Path, int], ...] = ()
        self.boots = 0

    def get(self, disks: pool.DiskSet, phases: dict[str, float]) -> Guest:
        """A guest with ``disks`` attached and nothing of theirs cached: the kept one when
        the disks are the same files, else a fresh boot (``phases`` gets its cost)."""
        key = tuple((d.serial, d.path, d.path.stat().st_size) for d in disks.all())
        if self._guest is not None and key == self._key:
            t = time.monotonic()
            forget_disks(self._guest, disks)
            phases["forget"] = time.monotonic() - t
            return self._guest
        self.close()
        self._guest = self._stack.enter_context(pool.guest(self.sc, disks, phases))
        self._key = key
        self.boots += 1
        return self._guest

    def release(self, *, ok: bool) -> None:
        """End of a repetition: export the pool for the next one, or (``ok`` false, the
        guest's state unknown) throw the guest away."""
        if self._guest is None:
            return
        if ok:
            try:
                pool.run(self._guest, ["zpool", "export", pool.POOL])
                return
            except HarnessError as e:  # the measurement is stored; only the guest is lost
                log.warning("zpool export failed, the next repetition boots afresh: %s", e)
        self.close()

    def close(self) -> None:
        self._guest = None
        self._key = ()
        self._stack.close()


def forget_disks(g: Guest, disks: pool.DiskSet) -> None:
    """Drop the guest's cached blocks and partition tables of ``disks`` (their files were
    rewritten by the host), let udev redo their links, and clear the last repetition's
    events (the scan is timed from the events that follow)."""
    nodes = " ".join(g.disk(d.serial) for d in disks.all())
    script = (
        f"for d in {nodes}; do blockdev --flushbufs $d; blockdev --rereadpt $d 2>/dev/null;"
        f" done; udevadm settle --timeout=30; zpool events -c >/dev/null"
    )
    pool.run(g, ["sh", "-c", script])
