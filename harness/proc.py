"""Every host child process goes through this module: argv lists only, timed, logged, and a
missing program becomes ToolMissing naming its package.

``run()`` runs a command to completion. ``spawn()`` starts one that outlives the call (a
guest's QEMU, the KVM probe, datasette) as a ``Child`` that is always stopped when its
block ends. Both leave a ``Result`` (argv, exit status, seconds, output) and a debug log
line, so every child the lab started can be accounted for.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import tools
from harness.errors import CommandFailed, CommandTimeout, HarnessError

log = logging.getLogger("crashlab.proc")


@dataclass(frozen=True)
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run(
    argv: Sequence[str | Path],
    *,
    check: bool = True,
    timeout: float | None = None,
    input: str | bytes | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    logfile: Path | None = None,
    pass_fds: Sequence[int] = (),
) -> Result:
    """Run ``argv`` to completion (killed after ``timeout`` seconds).

    With ``logfile``, stdout and stderr go to that file (for long builds) instead of memory.
    ``pass_fds``: file descriptors the command inherits (a pipe it writes a log into).

    :raise CommandFailed: ``check`` and it exited non-zero.
    :raise CommandTimeout: it ran past ``timeout`` (argv, timeout and its output's tail).
    :raise ToolMissing: the program is not installed.
    """
    args = [str(a) for a in argv]
    exe = tools.require(args[0]) if "/" not in args[0] else args[0]
    full_env = {**os.environ, **env} if env is not None else None
    log.debug("$ %s", shlex.join(args))
    # Each command in a process group of its own: Ctrl-C signals the terminal's whole
    # group, and an e2fsck cut short by it left a half-replayed journal that a check then
    # called damage (a false finding, seen by bench/chaos.py). The harness gets the
    # KeyboardInterrupt; subprocess.run kills the command on the way out. Out of the
    # terminal's foreground group a command must not read it (SIGTTIN would stop it).
    # No input: /dev/null, not an empty pipe (one pipe and one poll fewer a command;
    # a host check runs two a state).
    stdin: dict[str, Any] = (
        {"input": input.encode() if isinstance(input, str) else input}
        if input is not None
        else {"stdin": subprocess.DEVNULL}
    )
    how = {**stdin, "cwd": cwd, "env": full_env, "timeout": timeout, "pass_fds": pass_fds}
    start = time.monotonic()
    try:
        if logfile is not None:
            with open(logfile, "ab") as out:
                out.write(f"$ {shlex.join(args)}\n".encode())
                out.flush()
                cp = _run([exe, *args[1:]], how, stdout=out, stderr=subprocess.STDOUT)
            stdout, stderr = "", ""
        else:
            cp = _run([exe, *args[1:]], how, capture_output=True)
            stdout = cp.stdout.decode(errors="replace")
            stderr = cp.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired as e:
        # subprocess.run killed the child; what it printed so far says where it hung.
        if logfile is not None:
            output = logfile.read_text(errors="replace")
        else:
            output = _text(e.stderr) or _text(e.output)
        raise CommandTimeout(args, timeout, output) from None
    result = Result(args, cp.returncode, stdout, stderr, time.monotonic() - start)
    log.debug("exit %d in %.3f s", cp.returncode, result.seconds)
    if check and cp.returncode != 0:
        if logfile is not None:
            tail = logfile.read_text(errors="replace").splitlines()[-20:]
            stderr = "\n".join(tail)
        raise CommandFailed(args, cp.returncode, stdout, stderr)
    return result


def _run(argv: list[str], how: Mapping[str, Any], **out: Any) -> subprocess.CompletedProcess[bytes]:
    """subprocess.run as every command runs: in a process group of its own, its status
    judged by the caller."""
    return subprocess.run(argv, **how, **out, check=False, process_group=0)


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


class Child:
    """A running child process started by ``spawn()``; its output goes to a file."""

    def __init__(self, argv: list[str], popen: subprocess.Popen[bytes], output: Path | None):
        self.argv = argv
        self.popen = popen
        self.output = output
        self.started = time.monotonic()
        self.result: Result | None = None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Block until the child exits by itself; its exit status.

        :raise CommandTimeout: still running after ``timeout`` seconds (it is left
            running: stopping it is the caller's, or the ``spawn`` block's, to do).
        """
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise CommandTimeout(self.argv, timeout, self.read_output()) from None

    def read_output(self) -> str:
        if self.output is None or not self.output.exists():
            return ""
        return self.output.read_text(errors="replace")

    def kill(self) -> Result:
        """SIGKILL now, no grace: the process gets no chance to flush anything (a guest's
        power cut). Idempotent, like ``stop``."""
        if self.popen.poll() is None:
            self.popen.kill()
        return self.stop(0, terminate=False)

    def stop(self, grace: float = 10.0, *, terminate: bool = True) -> Result:
        """SIGTERM (unless the caller already asked it to quit), wait ``grace`` seconds,
        then SIGKILL. Idempotent; returns what the child left."""
        if self.result is not None:
            return self.result
        if self.popen.poll() is None and terminate:
            self.popen.terminate()
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self.result = Result(
            self.argv,
            self.popen.returncode,
            self.read_output(),
            "",
            time.monotonic() - self.started,
        )
        log.debug(
            "exit %d after %.3f s: %s", self.result.returncode, self.result.seconds, self.argv[0]
        )
        return self.result


def logged(
    argv: Sequence[str | Path],
    logfile: Path,
    what: str,
    *,
    error: type[HarnessError] = HarnessError,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Result:
    """One step of a long build, its output appended to ``logfile``.

    :raise HarnessError: (or ``error``) it failed: "``what`` failed (exit status N)", the
        log's tail and where the whole log is.
    """
    try:
        return run(argv, logfile=logfile, cwd=cwd, env=env)
    except CommandFailed as e:
        raise error(
            f"{what} failed (exit status {e.returncode})",
            hint=f"full log: {logfile}",
            detail=e.stderr,
        ) from None


@contextlib.contextmanager
def spawn(
    argv: Sequence[str | Path],
    *,
    output: Path | None = None,
    die_with_parent: bool = False,
    grace: float = 10.0,
    cwd: Path | None = None,
) -> Iterator[Child]:
    """Start ``argv`` (stdin closed, stdout and stderr to ``output`` or discarded; in
    ``cwd``) and stop it when the block ends, however it ends.

    ``die_with_parent``: the kernel SIGTERMs the child when we die, even by SIGKILL, so a
    killed harness leaves no server holding a port (Linux's PR_SET_PDEATHSIG).
    """
    args = [str(a) for a in argv]
    exe = tools.require(args[0]) if "/" not in args[0] else args[0]
    log.debug("$ %s &", shlex.join(args))
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(output.open("wb")) if output is not None else subprocess.DEVNULL
        popen = subprocess.Popen(
            [exe, *args[1:]],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if die_with_parent else None,
            cwd=cwd,
        )
    child = Child(args, popen, output)
    try:
        yield child
    finally:
        child.stop(grace)


def end_with_parent() -> None:
    """In a forked worker: die when the harness does, even by SIGKILL (a host-check worker
    outlived a killed harness as an orphan, seen by bench/chaos.py)."""
    _die_with_parent()


def _die_with_parent() -> None:
    """In the child, before exec: ask for SIGTERM when the parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


@contextlib.contextmanager
def quiet_start() -> Iterator[None]:
    """Start workers (a LocalCluster's, the host checks' forked ones) deaf to Ctrl-C, and
    hold a SIGTERM until they are up.

    Ctrl-C signals the terminal's whole process group: every worker printed its own
    KeyboardInterrupt traceback, while the harness stops its workers itself. A worker
    started with SIGINT ignored keeps it ignored (Python installs its handler only over the
    default). A SIGTERM while the cluster starts left it half made, and distributed's exit
    hook then failed an assertion on the terminal; held, it stops the run once the cluster
    is on the caller's stack and closed in order. A forked host-check worker hit by Ctrl-C
    inside its fork hooks printed "Exception ignored" tracebacks. All seen by
    bench/chaos.py.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    if held:
        raise KeyboardInterrupt
