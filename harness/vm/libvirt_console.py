"""The guest's serial console through libvirt (virDomainOpenConsole), into a file here.

The domain's serial port is a pty on the libvirt host; a thread reads it through a
``virStream`` and appends to the local console log, which ``harness.vm.guest`` scans for
panics, oopses and boot failures as it does the QEMU backend's. It works the same for a
remote URI (the stream is carried by libvirt's connection), so there is one way to get
the console, not a file for this host and a stream for the others.

QEMU drops what a pty prints while no one has it open, so the domain is started paused
and resumed only once the stream is open: nothing of the boot is lost.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path
from typing import Any

from harness.vm import libvirtd

log = logging.getLogger("crashlab.libvirt")
_CHUNK = 64 << 10


class ConsoleStream:
    """Copies the domain's console to ``path`` until the domain stops (the stream's end)."""

    def __init__(self, conn: Any, domain: Any, path: Path):
        libvirt = libvirtd.module()
        self.path = path
        self.stream = conn.newStream(0)
        # FORCE: a console someone left open (virsh console) must not cost us the log.
        domain.openConsole(None, self.stream, libvirt.VIR_DOMAIN_CONSOLE_FORCE)
        self._out = open(path, "ab", buffering=0)  # noqa: SIM115 - the thread closes it
        self._thread = threading.Thread(
            target=self._copy, name=f"console-{domain.name()}", daemon=True
        )
        self._thread.start()

    def _copy(self) -> None:
        libvirt = libvirtd.module()
        try:
            while True:
                data = self.stream.recv(_CHUNK)
                if not isinstance(data, bytes) or not data:
                    break
                self._out.write(data)
        except libvirt.libvirtError as e:
            # The pty closes with QEMU: libvirt reports that as an I/O error, not an end.
            log.debug("console stream of %s ended: %s", self.path, e)
        finally:
            self._out.close()

    def wait(self, timeout: float) -> None:
        """Wait (up to ``timeout``) for the copy to end: once the domain has stopped, the
        last lines it printed (a panic's) reach the file before anyone reads it."""
        self._thread.join(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """End the stream (the domain is gone, or going) and the thread."""
        self.wait(timeout)
        with contextlib.suppress(libvirtd.module().libvirtError):
            if self._thread.is_alive():
                self.stream.abort()
            else:
                self.stream.finish()
        self._thread.join(timeout)
