"""A connection to libvirt, starting the local daemons first when none answers.

Lab hosts and CI containers often run without systemd, so nothing socket-activates
libvirtd: for the local system URI the lab starts ``virtlogd -d`` (libvirt writes the
serial console through it) and ``libvirtd -d`` itself and waits until the URI answers.
A remote URI (``qemu+ssh://host/system``) is never started from here: it must answer.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import urlsplit

from harness import proc, tools
from harness.errors import HarnessError

log = logging.getLogger("crashlab.libvirt")

DEFAULT_URI = "qemu:///system"
# A cold libvirtd probes QEMU's capabilities before it answers (~8-12 s here).
START_TIMEOUT = 60.0


def module() -> Any:
    """The ``libvirt`` binding, or a HarnessError saying how to get it."""
    try:
        import libvirt
    except ImportError:
        raise HarnessError(
            "the libvirt backend needs the Python binding libvirt-python, which is not installed",
            hint="run `make setup` (installs libvirt-dev and builds it into .venv), or: "
            "apt-get install libvirt-dev pkg-config gcc python3-dev && "
            ".venv/bin/pip install libvirt-python",
        ) from None
    # libvirt prints every error to stderr by default; ours are raised, with a hint.
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    return libvirt


def is_local_system(uri: str) -> bool:
    """``qemu:///system``: the daemon on this host, which the lab may start."""
    u = urlsplit(uri)
    return u.scheme == "qemu" and not u.netloc and u.path == "/system"


def connect(uri: str = DEFAULT_URI) -> Any:
    """An open ``virConnect`` to ``uri``; starts the local daemons when they are not running.

    :raise HarnessError: the binding is missing, the daemons cannot be started, or the URI
        does not answer (exit 3, with what to do).
    """
    libvirt = module()
    try:
        return libvirt.open(uri)
    except libvirt.libvirtError as e:
        first = str(e)
    if not is_local_system(uri):
        raise HarnessError(
            f"libvirt URI {uri} does not answer: {first}",
            hint="check the URI (e.g. qemu+ssh://HOST/system), that libvirtd runs there and "
            f"that `virsh -c {uri} version` works from this host",
        )
    started = start_daemons()
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            return libvirt.open(uri)
        except libvirt.libvirtError as e:
            last = str(e)
        if time.monotonic() > deadline:
            raise HarnessError(
                f"libvirt URI {uri} does not answer {START_TIMEOUT:g} s after starting "
                f"libvirtd: {last}",
                hint="see /var/log/libvirt/ and try `libvirtd` in the foreground; "
                "the lab needs libvirt-daemon-system (scripts/install-host-deps)",
                detail=started,
            )
        time.sleep(0.2)


def start_daemons() -> str:
    """``virtlogd -d`` and ``libvirtd -d`` (each refuses to start twice, which is fine:
    one already running is what we want); what they said, for an error message."""
    said = []
    for daemon in ("virtlogd", "libvirtd"):
        tools.require(daemon)
        r = proc.run([daemon, "-d"], check=False, timeout=60)
        log.info("started %s -d: exit %d", daemon, r.returncode)
        said.append(f"$ {daemon} -d  (exit {r.returncode})\n{(r.stderr or r.stdout).strip()}")
    return "\n".join(said)
