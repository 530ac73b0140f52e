"""The run's one guest: every fill's and every repetition's disks plugged in and out of it.

With the cells filled once (``basefill``) a repetition's fixed cost was mostly the guest's
boot under TCG (10-22 s here, against a 5-35 s scan at 1 GiB disks), and then the copies
of the filled disks over the files the guest kept open (5.6 s of a 25 s repetition at
1 GiB). So the guest boots once, with spare PCIe ports and no pool disk, and each ladder
of fills and each repetition hot-plugs its disks: a repetition's are qcow2 overlays on
the kept fill (``basefill.restore``), made in milliseconds instead of copied. Unplugged
disks leave nothing cached in the guest, and new disks of another count or size plug in
as well as the same ones, so every cell of a sweep (widths, cache and log disks
included) shares the one boot. What else could leak between repetitions does not: the
pool is exported (which evicts it from the ARC) before its disks go, and the event queue
is cleared before each fault. A repetition that fails throws the guest away: the next
one boots a fresh guest.
"""

from __future__ import annotations

import contextlib
import logging
import time

from harness.errors import HarnessError
from harness.experiments.zfs import pool
from harness.experiments.zfs.settings import ZfsScenario
from harness.vm.backend import Guest

log = logging.getLogger("crashlab.zfs")


class KeptGuest:
    """The guest of the run, booted on first use with ``ports`` hotplug ports."""

    def __init__(self, sc: ZfsScenario, ports: int):
        self.sc = sc
        self.ports = ports
        self._stack = contextlib.ExitStack()
        self._guest: Guest | None = None
        self._plugged: list[str] = []
        self.boots = 0

    def plug(self, disks: pool.DiskSet, phases: dict[str, float]) -> Guest:
        """The guest with ``disks`` plugged in (booted first if there is none; ``phases``
        gets the boot's and the plugging's cost) and an empty event queue."""
        if self._guest is None:
            self._guest = self._stack.enter_context(
                pool.guest(self.sc, (), phases, hotplug_ports=self.ports)
            )
            self.boots += 1
        g = self._guest
        t = time.monotonic()
        g.attach_disks(disks.all())
        self._plugged = [d.serial for d in disks.all()]
        # udev makes the partitions' by-id links `zpool import -d` looks through.
        pool.run(g, ["sh", "-c", "udevadm settle --timeout=30; zpool events -c >/dev/null"])
        phases["plug"] = phases.get("plug", 0.0) + time.monotonic() - t
        return g

    def release(self, *, ok: bool, phases: dict[str, float] | None = None) -> None:
        """End of a repetition or a fill: export the pool and unplug its disks, or (``ok``
        false, the guest's state unknown) throw the guest away."""
        if self._guest is None:
            return
        if ok:
            t = time.monotonic()
            try:
                pool.run(self._guest, ["zpool", "export", pool.POOL])
                self._guest.detach_disks(self._plugged)
                self._plugged = []
                if phases is not None:
                    phases["unplug"] = time.monotonic() - t
                return
            except HarnessError as e:  # the measurement is stored; only the guest is lost
                log.warning("export or unplug failed, the next repetition boots afresh: %s", e)
        self.close()

    def close(self) -> None:
        self._guest = None
        self._plugged = []
        self._stack.close()
