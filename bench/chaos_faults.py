"""The faults chaos.py injects into a running ``scenario`` process, each a function
``(Target, Random) -> str``: it does its harm and says what it did, or raises NoTarget when
there was nothing to hit (the run had no guest left, say), which is then not counted.

A fault that leaves the harness running (a full disk, a locked store, a missing tool)
undoes itself when ``Target.proc`` ends or its hold time is over, so the resume that
follows meets a healthy host.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from random import Random

# How long a full disk, a held store lock or a missing tool lasts, at most: past the
# store's own 30 s busy timeout, so the harness meets the fault and does not just wait.
HOLD = 45.0
# Tools the harness finds on PATH (tools.require; /usr/sbin is always appended, so the
# fsck tools cannot be taken away this way).
TOOLS = ("qemu-system-x86_64", "qemu-img")


class NoTarget(Exception):
    """Nothing to hit at this moment (no guest running, no store yet)."""


@dataclass
class Target:
    proc: subprocess.Popen[bytes]
    results: Path  # CRASHLAB_RESULTS, a tmpfs of its own
    db: Path
    shadow: Path  # the PATH dir the harness runs with: links to /usr/bin's programs

    def alive(self) -> bool:
        return self.proc.poll() is None

    def hold(self, seconds: float = HOLD) -> None:
        """Wait until the harness ends or ``seconds`` pass."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=seconds)


def session(sid: int) -> dict[int, str]:
    """pid -> command name of the processes of session ``sid`` (the harness started its
    own: everything it spawned is in it unless it left it)."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] != "Z":  # fields[3]: the session id
            found[int(d.name)] = comm
    return found


def guests(t: Target, wait: float) -> list[int]:
    """The QEMU processes of the harness; polls up to ``wait`` s for one to start."""
    deadline = time.monotonic() + wait
    while t.alive():
        pids = [p for p, c in session(t.proc.pid).items() if c.startswith("qemu-system")]
        if pids:
            return pids
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    raise NoTarget("no guest running")


def sigkill(t: Target, rnd: Random) -> str:
    os.kill(t.proc.pid, signal.SIGKILL)
    return "SIGKILL to the harness"


def sigterm(t: Target, rnd: Random) -> str:
    os.kill(t.proc.pid, signal.SIGTERM)
    return "SIGTERM to the harness"


def sigint(t: Target, rnd: Random) -> str:
    # Ctrl-C in a terminal signals the whole foreground process group, QEMU included.
    os.killpg(t.proc.pid, signal.SIGINT)
    return "SIGINT to the harness's process group (Ctrl-C)"


def kill_qemu(t: Target, rnd: Random) -> str:
    pid = rnd.choice(guests(t, wait=120))
    os.kill(pid, signal.SIGKILL)
    return f"SIGKILL to QEMU {pid}"


def kill_agent(t: Target, rnd: Random) -> str:
    """Take the guest agent away: unplug its virtio-serial port over QMP, so qemu-ga in
    the guest loses its channel and every command the harness has in flight or sends
    next goes unanswered -- what a crashed qemu-ga looks like from the host."""
    from qemu.qmp.legacy import QEMUMonitorProtocol

    pid = guests(t, wait=120)[0]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    sock = next((a[5:].split(",")[0] for a in argv if a.startswith("unix:")), None)
    if sock is None:
        raise NoTarget("no QMP socket on QEMU's command line")
    qmp = QEMUMonitorProtocol(sock)
    try:
        qmp.connect()
        anon = "/machine/peripheral-anon"
        for child in qmp.cmd("qom-list", path=anon):
            if "virtserialport" in child["type"]:
                qmp.cmd("device_del", id=f"{anon}/{child['name']}")
                return f"guest agent's port unplugged (QEMU {pid})"
    except (OSError, Exception) as e:  # the guest went away under us: nothing was hit
        raise NoTarget(f"QMP: {e}") from None
    finally:
        with contextlib.suppress(Exception):
            qmp.close()
    raise NoTarget("no virtserialport")


def enospc(t: Target, rnd: Random) -> str:
    """Fill the tmpfs under the store to the last byte, then free it after HOLD s."""
    filler = t.results / "chaos-filler"
    free = os.statvfs(t.results).f_bavail * os.statvfs(t.results).f_frsize
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            os.posix_fallocate(fd, 0, free)
        with contextlib.suppress(OSError):  # the last partial pages, unbuffered
            while os.write(fd, b"\0" * 4096):
                pass
        t.hold()
    finally:
        os.close(fd)
        filler.unlink()
    return f"store's filesystem full ({free >> 20} MiB filled) for up to {HOLD:g} s"


def store_lock(t: Target, rnd: Random) -> str:
    """BEGIN EXCLUSIVE on the store from another connection, held HOLD s."""
    deadline = time.monotonic() + 120
    while not t.db.exists():
        if not t.alive() or time.monotonic() > deadline:
            raise NoTarget("no store yet")
        time.sleep(0.5)
    conn = sqlite3.connect(t.db, timeout=60, isolation_level=None)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        t.hold()
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    return f"store write-locked by another process for up to {HOLD:g} s"


def tool_gone(t: Target, rnd: Random) -> str:
    tool = rnd.choice(TOOLS)
    link = t.shadow / tool
    target = os.readlink(link)
    link.unlink()
    t.hold()
    link.symlink_to(target)
    return f"{tool} removed from PATH for up to {HOLD:g} s"


FAULTS: dict[str, Callable[[Target, Random], str]] = {
    "sigkill": sigkill,
    "sigterm": sigterm,
    "sigint": sigint,
    "kill-qemu": kill_qemu,
    "kill-agent": kill_agent,
    "enospc": enospc,
    "store-lock": store_lock,
    "tool-gone": tool_gone,
}
# Faults after which the run must say so: marked interrupted (a clean stop).
STOPS = {"sigterm", "sigint"}


def make_shadow(d: Path) -> Path:
    """A PATH directory of links to every program in /usr/bin (never the programs
    themselves): one can be taken away without touching the system."""
    d.mkdir(parents=True, exist_ok=True)
    for p in Path("/usr/bin").iterdir():
        link = d / p.name
        if not link.is_symlink():
            link.symlink_to(p)
    return d


def hold_in_thread(fn: Callable[[], str]) -> tuple[threading.Thread, list[str]]:
    """Run a fault in a thread: its text, or ``!`` + why it had no target."""
    out: list[str] = []

    def run() -> None:
        try:
            out.append(fn())
        except NoTarget as e:
            out.append(f"!{e}")

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out
