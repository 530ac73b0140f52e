"""Which backend starts a guest: direct QEMU (``harness.vm.qemu``, the default) or
libvirt (``harness.vm.libvirt``, a transient domain).

Callers use ``start_guest()`` and a ``Guest``; nothing else. Which backend
``start_guest`` uses is chosen once per run by ``select()`` (the CLI does it from the
scenario's ``backend`` key, ``--backend`` or ``CRASHLAB_BACKEND``); without a choice,
``CRASHLAB_BACKEND`` or QEMU. The disks, the spec and the protocols live in
``harness.vm.base`` (re-exported here for callers); the backends import that, never
this module, and are imported here only when chosen (libvirt's binding is optional).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from harness.config.vm import DEFAULT_LIBVIRT_URI
from harness.config.vm import Backend as BackendName
from harness.errors import InputError
from harness.vm.base import HOTPLUG_PORTS, Backend, Disk, Guest, GuestSpec, Machine

__all__ = [
    "HOTPLUG_PORTS",
    "Backend",
    "BackendName",
    "Disk",
    "Guest",
    "GuestSpec",
    "Machine",
    "Selection",
    "backend",
    "select",
    "selected",
    "start_guest",
]


@dataclass(frozen=True)
class Selection:
    backend: BackendName = BackendName.QEMU
    libvirt_uri: str = DEFAULT_LIBVIRT_URI
    libvirt_pool: str = ""  # "": the libvirt host opens our paths (libvirt_storage)


_selected: Selection | None = None


def select(
    backend: BackendName | str, libvirt_uri: str = DEFAULT_LIBVIRT_URI, libvirt_pool: str = ""
) -> None:
    """The backend every later ``start_guest()`` of this process uses."""
    global _selected
    _selected = Selection(BackendName(backend), libvirt_uri, libvirt_pool)


def selected() -> Selection:
    """What ``select()`` chose; else ``CRASHLAB_BACKEND`` / ``CRASHLAB_LIBVIRT_URI`` /
    ``CRASHLAB_LIBVIRT_POOL``."""
    if _selected is not None:
        return _selected
    name = os.environ.get("CRASHLAB_BACKEND") or BackendName.QEMU
    if name not in set(BackendName):
        raise InputError(
            f"CRASHLAB_BACKEND={name!r}: unknown backend",
            hint="one of " + ", ".join(BackendName),
        )
    return Selection(
        BackendName(name),
        os.environ.get("CRASHLAB_LIBVIRT_URI") or DEFAULT_LIBVIRT_URI,
        os.environ.get("CRASHLAB_LIBVIRT_POOL", ""),
    )


def _qemu(sel: Selection) -> Backend:
    from harness.vm.qemu import QemuBackend

    return QemuBackend()


def _libvirt(sel: Selection) -> Backend:
    from harness.vm.libvirt import LibvirtBackend

    return LibvirtBackend(sel.libvirt_uri, sel.libvirt_pool)


_BACKENDS: dict[BackendName, Callable[[Selection], Backend]] = {
    BackendName.QEMU: _qemu,
    BackendName.LIBVIRT: _libvirt,
}


def backend() -> Backend:
    """The selected backend (``selected()``)."""
    sel = selected()
    return _BACKENDS[sel.backend](sel)


def start_guest(spec: GuestSpec) -> AbstractContextManager[Guest]:
    """Boot a fresh disposable guest with the selected backend (``select()``)."""
    return backend().start(spec)
