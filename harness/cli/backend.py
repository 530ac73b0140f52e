"""``--backend``, ``--libvirt-uri``, ``--libvirt-pool`` and ``--kernel``: which VM backend
a command's guests boot on, how their files reach a libvirt host, and which kernel they
boot.

On ``scenario run`` and ``scenario campaign run`` they are overrides of the scenario keys
``backend``, ``libvirt_uri`` and ``libvirt_pool`` (harness/config/vm.py); the
environment's ``CRASHLAB_BACKEND`` / ``CRASHLAB_LIBVIRT_URI`` / ``CRASHLAB_LIBVIRT_POOL``
come before a flag and after a scenario or campaign file's own keys.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from harness.config.vm import Backend
from harness.errors import InputError
from harness.kernel import mutant
from harness.vm import backend as vm_backend

_checked: set[tuple[str, str]] = set()
# Scenario key (also the flag's attribute) and its environment variable.
_ENV = (
    ("backend", "CRASHLAB_BACKEND"),
    ("libvirt_uri", "CRASHLAB_LIBVIRT_URI"),
    ("libvirt_pool", "CRASHLAB_LIBVIRT_POOL"),
    ("kernel", "CRASHLAB_KERNEL"),
)


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
    p.add_argument(
        "--libvirt-pool",
        default=None,
        metavar="NAME",
        help="for a libvirt host that does not share this host's files: upload the image "
        "(once per content) and the disks into its storage pool NAME, and the disks back "
        "after the guest; also CRASHLAB_LIBVIRT_POOL or the scenario key `libvirt_pool`",
    )
    _kernel_option(p)


def _kernel_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fs-patch",
        type=lambda s: f"kernel={Path(s).expanduser().resolve()}",
        dest="fs_patch",
        default=None,
        metavar="FILE",
        help="boot the image's kernel with the ext4, jbd2, xfs or btrfs module rebuilt "
        "from this patch of linux-source-6.1 (cached by its hash); e.g. a mutants/ file",
    )
    p.add_argument(
        "--kernel",
        default=None,
        metavar="RELEASE",
        help="boot guests on this kernel (`scenario kernel list`) instead of the image's "
        "own; also CRASHLAB_KERNEL or the scenario key `kernel`",
    )


def overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` overrides for the environment's and the flags' choice, flags last."""
    env = os.environ.get("CRASHLAB_BACKEND")
    if env and env not in set(Backend):
        raise InputError(
            f"CRASHLAB_BACKEND={env!r}: unknown backend", hint="one of " + ", ".join(Backend)
        )
    sets = [f"{key}={os.environ[var]}" for key, var in _ENV if os.environ.get(var)]
    flags = [f"{key}={getattr(args, key)}" for key, _ in _ENV if getattr(args, key, None)]
    patch = [args.fs_patch] if getattr(args, "fs_patch", None) else []
    if patch:  # before a scenario loads: a file that is not a patch is named as such
        mutant.check_patch(Path(args.fs_patch.partition("=")[2]))
    return sets + flags + patch


def select_for(sc: Any) -> None:
    """Make the scenario's backend the one ``start_guest`` uses; a libvirt URI that does
    not answer, or a storage pool it does not have, is reported now, before a run is
    recorded (HarnessError, exit 3)."""
    vm_backend.select(sc.backend, sc.libvirt_uri, sc.libvirt_pool)
    where = (sc.libvirt_uri, sc.libvirt_pool)
    if sc.backend is Backend.LIBVIRT and where not in _checked:
        from harness.vm import libvirt_storage, libvirtd

        conn = libvirtd.connect(sc.libvirt_uri)
        try:
            if sc.libvirt_pool:
                libvirt_storage.open_pool(conn, sc.libvirt_uri, sc.libvirt_pool)
        finally:
            conn.close()
        _checked.add(where)
