"""What a killed harness can leave behind, found by the lab's own names and nothing else
(``scenario lab clean``).

- a QEMU guest whose harness is gone (its parent is no longer a Python process: guests
  are started by the harness itself, and die with it since PR_SET_PDEATHSIG, so this
  finds guests of older harnesses or of one killed mid-spawn);
- a guest's work directory (``/tmp/crashlab-vm-*``, ``crashlab-probe-*``) no live
  process names, and old enough not to be one a harness is about to launch a guest in;
- a Dask worker's log cache (``/tmp/crashlab-dask-<pid>``) whose worker is gone;
- a libvirt guest's root overlay (``harness.vm.overlays``: ``crashlab-<12 hex>-*.qcow2``
  in the lab's cache) no process names, and old enough not to be one about to be booted;
- libvirt volumes of a guest whose domain is gone (``crashlab-<12 hex>-<serial>``; its
  domain was transient and AUTODESTROYed with the harness's connection). The image
  volumes (``crashlab-<24 hex>-<file>``) are the pool's cache and stay.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.vm import overlays

# A work directory younger than this may be one a harness made and is about to use.
SETTLE_SECONDS = 600
WORKDIR_PREFIXES = ("crashlab-vm-", "crashlab-probe-")
GUEST_VOLUME = re.compile(r"(crashlab-[0-9a-f]{12})-.+")
OVERLAY = re.compile(r"crashlab-[0-9a-f]{12}-.+\.qcow2")
WORKER_CACHE = re.compile(r"crashlab-dask-(\d+)")


@dataclass(frozen=True)
class Leftover:
    kind: str  # guest | workdir | overlay | volume
    what: str  # pid, path or volume name
    why: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "what": self.what, "why": self.why}


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat.rpartition(")")[2].split()
    return int(fields[1]) if fields[0] != "Z" else 0


def _processes() -> dict[int, list[str]]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (argv := _cmdline(int(entry.name))):
            out[int(entry.name)] = argv
    return out


def is_lab_guest(argv: list[str]) -> bool:
    return Path(argv[0]).name.startswith("qemu-system") and any("crashlab" in a for a in argv[1:])


def _run_by_libvirt(argv: list[str]) -> bool:
    """libvirt names its QEMU ``-name guest=NAME`` and daemonizes it, so its parent is
    never the harness; its life is libvirt's (AUTODESTROY), not ours to end."""
    return any(a == "-name" and b.startswith("guest=") for a, b in itertools.pairwise(argv))


def _named(procs: dict[int, list[str]]) -> str:
    """Every argument of every process, to tell whether a path is in use."""
    return "\0".join("\0".join(argv) for argv in procs.values())


def _settled(path: Path) -> bool:
    return time.time() - path.stat().st_mtime >= SETTLE_SECONDS


def guests(procs: dict[int, list[str]]) -> list[Leftover]:
    found = []
    for pid, argv in sorted(procs.items()):
        if not is_lab_guest(argv) or _run_by_libvirt(argv):
            continue
        parent = procs.get(_parent(pid), [])
        if not (parent and Path(parent[0]).name.startswith("python")):
            found.append(Leftover("guest", str(pid), "QEMU of the lab whose harness is gone"))
    return found


def workdirs(procs: dict[int, list[str]], tmp: Path | None = None) -> list[Leftover]:
    tmp = tmp or Path(tempfile.gettempdir())
    named = _named(procs)
    found = []
    for d in sorted(tmp.iterdir()):
        if not d.is_dir():
            continue
        if (m := WORKER_CACHE.fullmatch(d.name)) and int(m.group(1)) not in procs:
            found.append(Leftover("workdir", str(d), "a Dask worker's log cache; it is gone"))
        if not d.name.startswith(WORKDIR_PREFIXES):
            continue
        if str(d) in named or not _settled(d):
            continue
        found.append(Leftover("workdir", str(d), "a guest's work directory no process uses"))
    return found


def root_overlays(procs: dict[int, list[str]], where: Path | None = None) -> list[Leftover]:
    """Root overlays of libvirt guests (``harness.vm.overlays``) that no QEMU opens: a
    running guest's QEMU names its overlay in its command line."""
    where = where or overlays.overlay_dir()
    named = _named(procs)
    found = []
    for f in sorted(where.iterdir()) if where.is_dir() else []:
        if OVERLAY.fullmatch(f.name) and str(f) not in named and _settled(f):
            found.append(Leftover("overlay", str(f), "a libvirt guest's root overlay; it is gone"))
    return found


def volumes(pool: Any, conn: Any) -> list[Leftover]:
    """Guest volumes in libvirt ``pool`` whose domain ``conn`` no longer has."""
    live = {d.name() for d in conn.listAllDomains()}
    found = []
    for name in sorted(pool.listVolumes()):
        m = GUEST_VOLUME.fullmatch(name)
        if m and m.group(1) not in live:
            found.append(Leftover("volume", name, f"its guest {m.group(1)} is gone"))
    return found


def find(tmp: Path | None = None) -> list[Leftover]:
    """Local leftovers: orphaned guests, unused work directories and root overlays."""
    procs = _processes()
    return guests(procs) + workdirs(procs, tmp) + root_overlays(procs)


def remove(items: list[Leftover], pool: Any = None) -> None:
    for it in items:
        if it.kind == "guest":
            _end(int(it.what))
        elif it.kind == "workdir":
            shutil.rmtree(it.what, ignore_errors=True)
        elif it.kind == "overlay":
            Path(it.what).unlink(missing_ok=True)
        elif it.kind == "volume" and pool is not None:
            pool.storageVolLookupByName(it.what).delete(0)


def _end(pid: int, grace: float = 10.0) -> None:
    """SIGTERM (QEMU quits cleanly on it), SIGKILL past ``grace``."""
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _parent(pid):
            time.sleep(0.1)
        if _parent(pid):
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
