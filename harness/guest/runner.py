"""How every guest program runs a command (runs inside the guest; stdlib only).

``run()`` is the one place a guest program starts a command: argv only, bounded by a
timeout, and never stuck behind one that cannot die (a process blocked in the kernel on
a suspended pool or a device that never answers ignores SIGKILL: after a short grace it
is abandoned, not waited for).
``Ran.record()`` is what crosses back to the host: a ``contract.Command``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..model import contract

# udev would otherwise be asked to settle after every dmsetup call and stall the guest.
ENV = {**os.environ, "DM_DISABLE_UDEV": "1"}
# The host reads a command's timeout by this marker in its output (check/guest.py).
TIMED_OUT = "[timed out]"
# How long a command killed at its timeout gets to hand back its output.
GRACE = 5.0


@dataclass(frozen=True)
class Ran:
    """What a command did: ``rc`` -1 when it was killed at its timeout."""

    argv: list[str]
    rc: int
    stdout: str
    stderr: str  # "" with ``merge``: it went to stdout, in order
    seconds: float
    timed_out: bool = False

    def output(self) -> str:
        """stdout then stderr (the timeout marker last), cut as the contract cuts it."""
        return contract.excerpt(self.stdout + self.stderr)

    def record(self) -> contract.Command:
        """What the host reads of it: argv, rc, seconds and the output's tail."""
        return contract.Command(
            argv=self.argv, rc=self.rc, seconds=round(self.seconds, 3), output=self.output()
        )


def run(
    argv: list[str],
    timeout: float | None = None,
    *,
    env: dict[str, str] | None = None,
    merge: bool = False,
) -> Ran:
    """Run ``argv`` (stdin closed, environment ``env`` or ``ENV``) for at most ``timeout``
    seconds; ``merge``: stderr into stdout, interleaved as printed."""
    return start(argv, env=env, merge=merge).wait(timeout)


@dataclass(frozen=True)
class Started:
    """A command started and not yet waited for: ``run()``'s, or one left running beside
    the workload (blktrace) until ``stop()``."""

    argv: list[str]
    p: subprocess.Popen[bytes]
    start: float

    def wait(self, timeout: float | None) -> Ran:
        """Its end, at most ``timeout`` seconds from now; killed after that."""
        try:
            out, err = self.p.communicate(timeout=timeout)
            rc, timed_out = self.p.returncode, False
        except subprocess.TimeoutExpired:
            self.p.kill()
            try:
                out, err = self.p.communicate(timeout=GRACE)
            except subprocess.TimeoutExpired:
                out, err = b"", b""  # unkillable: abandoned, its output with it
            rc, timed_out = -1, True
        stderr = (err or b"").decode(errors="replace")
        if timed_out:
            stderr += f"\n{TIMED_OUT}"
        return Ran(
            self.argv,
            rc,
            (out or b"").decode(errors="replace"),
            stderr,
            time.monotonic() - self.start,
            timed_out,
        )

    def stop(self, sig: int = signal.SIGINT, timeout: float | None = 120) -> Ran:
        """Send ``sig`` if it still runs (SIGINT: a tracer writes out what it holds), then
        ``wait``."""
        if self.p.poll() is None:
            self.p.send_signal(sig)
        return self.wait(timeout)


def start(argv: list[str], *, env: dict[str, str] | None = None, merge: bool = False) -> Started:
    """Start ``argv`` as ``run()`` does, without waiting for it."""
    p = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge else subprocess.PIPE,
        env=ENV if env is None else env,
    )
    return Started(argv, p, time.monotonic())


def filesystem(fs: str) -> dict[str, list[str]]:
    """The host's table of ``fs``'s commands (harness/filesystems.py), installed beside
    the guest programs as filesystems.json."""
    table = json.loads((Path(__file__).parent / "filesystems.json").read_text())
    if fs not in table:
        raise SystemExit(f"unknown fs {fs}")
    return dict(table[fs])


def before_mount(fs: str, dev: str, timeout: float) -> contract.Command | None:
    """The log replay the system runs before it mounts ``fs`` after a crash (JFS's
    fsck.jfs; the kernel refuses the dirty volume), its record; None for a filesystem
    whose mount is its recovery."""
    argv = filesystem(fs).get("before_mount") or []
    return run([*argv, dev], timeout, merge=True).record() if argv else None


class Kmsg:
    """The kernel's messages from now on, read from ``/dev/kmsg``: what ``dmesg --clear``
    then ``dmesg`` gave, without the two processes (a check spawned three ``dmesg`` a
    state, each tens of milliseconds under TCG) and without clearing the ring for others.
    Lines read as dmesg prints them: ``[seconds] message``."""

    def __init__(self) -> None:
        self._fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(self._fd, 0, os.SEEK_END)
        self.lines: list[str] = []

    def read(self) -> list[str]:
        """Every message since this reader was made (those since the last call added)."""
        while True:
            try:
                record = os.read(self._fd, 8192)
            except BlockingIOError:  # nothing more yet
                return self.lines
            except BrokenPipeError:  # the ring overwrote records we had not read: go on
                continue
            if not record:
                return self.lines
            head, _, text = record.decode(errors="replace").partition(";")
            fields = head.split(",")
            micros = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else 0
            message = text.split("\n", 1)[0]  # continuation lines are key=value pairs
            self.lines.append(f"[{micros // 1_000_000:5d}.{micros % 1_000_000:06d}] {message}")

    def close(self) -> None:
        os.close(self._fd)
