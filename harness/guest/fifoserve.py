"""A guest program that answers requests for as long as its guest lives (stdlib only).

Starting Python and importing a guest program costs about a second per request under
TCG -- more than many a request itself -- so a guest that asks many times starts its
program once (``checkstate.py --serve DIR``, ``ace.py serve DIR``) and the host hands it
one request at a time through two FIFOs: a line into ``DIR/req``, one line back out of
``DIR/resp`` (the host's side: harness/record/guestserve.py).
"""

from __future__ import annotations

import gc
import os
import sys
import traceback
from collections.abc import Callable


def serve(folder: str, handle: Callable[[str], str], failed: Callable[[str], str]) -> None:
    """Answer the requests in ``folder/req``, one line each, with ``handle(line)``: a
    one-line reply written to ``folder/resp``. A request whose handler raises gets
    ``failed(traceback)``, which the host reads as the lab's own failure, and the loop
    goes on. Never returns."""
    while True:
        with open(os.path.join(folder, "req")) as f:
            line = f.readline()
        if not line:  # a writer that closed without a request
            continue
        held = _descriptors()
        try:
            reply = handle(line)
        except BaseException:  # reported to the host, and the loop goes on
            reply = failed(traceback.format_exc())
        _close_left(held)
        with open(os.path.join(folder, "resp"), "w") as f:
            f.write(reply)


def _descriptors() -> dict[int, str]:
    """The process's open descriptors and what each is open on (the listing's own
    descriptor, closed by the time it is read, is not among them)."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
    return out


def _close_left(held: dict[int, str]) -> None:
    """Close the files a request opened and left open, as its own process's exit would
    have: a descriptor into a filesystem keeps it mounted and its devices busy for the
    rest of the guest's life, where a one-shot program's lived one request. Unreachable
    objects are collected first, so they close their own; only descriptors of files
    and directories are closed (a pipe or socket may belong to a live object: the
    pipes of a child the guest could not kill)."""
    gc.collect()
    for fd, target in _descriptors().items():
        if held.get(fd) != target and target.startswith("/"):
            print(f"fifoserve: closing descriptor {fd} left open: {target}", file=sys.stderr)
            os.close(fd)
