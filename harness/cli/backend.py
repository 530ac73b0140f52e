"""``--backend`` and ``--libvirt-uri``: which VM backend a command's guests boot on.

On ``scenario run`` and ``scenario campaign run`` they are overrides of the scenario keys
``backend`` and ``libvirt_uri`` (so they are stored with the run's parameters); the
environment's ``CRASHLAB_BACKEND`` / ``CRASHLAB_LIBVIRT_URI`` come before a flag and after
a scenario or campaign file's own keys.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from harness.config.vm import Backend
from harness.errors import InputError
from harness.vm import backend as vm_backend

_checked: set[str] = set()


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        choices=[str(b) for b in Backend],
        default=None,
        help="boot guests as QEMU processes (qemu, the default) or as transient libvirt "
        "domains (libvirt); also CRASHLAB_BACKEND or the scenario key `backend`",
    )
    p.add_argument(
        "--libvirt-uri",
        default=None,
        metavar="URI",
        help="libvirt connection for --backend libvirt (default qemu:///system; "
        "e.g. qemu+ssh://HOST/system); also CRASHLAB_LIBVIRT_URI",
    )


def overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` overrides for the environment's and the flags' choice, flags last."""
    sets = []
    env = os.environ.get("CRASHLAB_BACKEND")
    if env:
        if env not in set(Backend):
            raise InputError(
                f"CRASHLAB_BACKEND={env!r}: unknown backend",
                hint="one of " + ", ".join(Backend),
            )
        sets.append(f"backend={env}")
    if os.environ.get("CRASHLAB_LIBVIRT_URI"):
        sets.append(f"libvirt_uri={os.environ['CRASHLAB_LIBVIRT_URI']}")
    if args.backend:
        sets.append(f"backend={args.backend}")
    if args.libvirt_uri:
        sets.append(f"libvirt_uri={args.libvirt_uri}")
    return sets


def select_for(sc: Any) -> None:
    """Make the scenario's backend the one ``start_guest`` uses; a libvirt URI that does
    not answer is reported now, before a run is recorded (HarnessError, exit 3)."""
    vm_backend.select(sc.backend, sc.libvirt_uri)
    if sc.backend is Backend.LIBVIRT and sc.libvirt_uri not in _checked:
        from harness.vm import libvirtd

        libvirtd.connect(sc.libvirt_uri).close()
        _checked.add(sc.libvirt_uri)
