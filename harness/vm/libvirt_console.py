"""The guest's serial console through libvirt (virDomainOpenConsole), into a file here.

The domain's serial port is a pty on the libvirt host; a thread reads it through a
``virStream`` and appends to the local console log, which ``harness.vm.guest`` scans for
panics, oopses and boot failures as it does the QEMU backend's. It works the same for a
remote URI (the stream is carried by libvirt's connection), so there is one way to get
the console, not a file for this host and a stream for the others.

QEMU drops what a pty prints while no one has it open, so the domain is started paused
and resumed only once the stream is open: nothing of the boot is lost.

The stream has a connection of its own: a blocking ``virStreamRecv`` holds the remote
driver's lock of its connection, so on the guest's connection every other call (the
agent's) waited for the console's next byte (measured: ``dom.info()`` never returned).
A non-blocking stream would need libvirt's event loop in a thread of ours, registered
before any connection is opened: more machinery than a second connection.
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
    """Copies the domain's console to ``path`` until the domain stops (the stream's end).

    :raise libvirt.libvirtError: the console could not be opened.
    """

    def __init__(self, uri: str, domain: Any, path: Path):
        libvirt = libvirtd.module()
        self.path = path
        self.conn = libvirt.open(uri)
        try:
            self.stream = self.conn.newStream(0)
            # FORCE: a console someone left open (virsh console) must not cost us the log.
            self.conn.lookupByUUID(domain.UUID()).openConsole(
                None, self.stream, libvirt.VIR_DOMAIN_CONSOLE_FORCE
            )
        except BaseException:
            self.conn.close()
            raise
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
        """Once the domain is gone: wait for the stream's end, then close its connection.
        A stream that does not end (never seen) keeps its thread and connection rather
        than block us on the lock that thread holds; the process's exit ends both."""
        self.wait(timeout)
        if self._thread.is_alive():
            log.warning("console stream of %s did not end with its domain", self.path)
            return
        with contextlib.suppress(libvirtd.module().libvirtError):
            self.stream.finish()
        with contextlib.suppress(libvirtd.module().libvirtError):
            self.conn.close()
