"""Every host subprocess goes through ``run()``: argv lists only, timed, logged, and a
missing program becomes ToolMissing naming its package."""

from __future__ import annotations

import logging
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import tools
from harness.errors import CommandFailed, HarnessError

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
) -> Result:
    """Run ``argv``; raise CommandFailed if ``check`` and it fails, HarnessError on timeout.

    With ``logfile``, stdout and stderr go to that file (for long builds) instead of memory.
    """
    args = [str(a) for a in argv]
    exe = tools.require(args[0]) if "/" not in args[0] else args[0]
    full_env = None
    if env is not None:
        import os

        full_env = {**os.environ, **env}
    log.debug("$ %s", shlex.join(args))
    start = time.monotonic()
    try:
        if logfile is not None:
            with open(logfile, "ab") as out:
                out.write(f"$ {shlex.join(args)}\n".encode())
                out.flush()
                cp = subprocess.run(
                    [exe, *args[1:]],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    input=input.encode() if isinstance(input, str) else input,
                    cwd=cwd,
                    env=full_env,
                    timeout=timeout,
                    check=False,
                )
            stdout, stderr = "", ""
        else:
            cp = subprocess.run(
                [exe, *args[1:]],
                capture_output=True,
                input=input.encode() if isinstance(input, str) else input,
                cwd=cwd,
                env=full_env,
                timeout=timeout,
                check=False,
            )
            stdout = cp.stdout.decode(errors="replace")
            stderr = cp.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired as e:
        raise HarnessError(
            f"command timed out after {timeout} s: {args[0]}", detail="$ " + shlex.join(args)
        ) from e
    result = Result(args, cp.returncode, stdout, stderr, time.monotonic() - start)
    log.debug("exit %d in %.3f s", cp.returncode, result.seconds)
    if check and cp.returncode != 0:
        if logfile is not None:
            tail = logfile.read_text(errors="replace").splitlines()[-20:]
            stderr = "\n".join(tail)
        raise CommandFailed(args, cp.returncode, stdout, stderr)
    return result
