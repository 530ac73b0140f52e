"""The lab's exception tree.

Filesystem findings (lost fsync'd data, an unrepairable image) are *outcomes*, never
exceptions. Exceptions are for the two other things that can go wrong, kept apart so a
harness failure is never reported as a filesystem finding::

    CrashlabError                 message + hint; never shown as a traceback
     ├── NotRun                   exit 0: the kernel lacks what the scenario needs (not run)
     ├── InputError               exit 2: a bad scenario, option, file or value
     └── HarnessError             exit 3: the lab itself could not do its job
          ├── ToolMissing         a host program is not installed (names its package)
          ├── CommandFailed       a host command failed (argv, status, output)
          ├── CommandTimeout      a host command ran past its timeout (argv, timeout, output)
          ├── ImageError          the guest image could not be built or is missing
          ├── GuestMessageError   a guest program's answer broke the contract (model/contract.py)
          └── GuestError          the guest misbehaved
               ├── GuestBootFailed   QEMU or the kernel did not come up
               ├── GuestPanic        kernel panic or oops (console tail attached)
               ├── GuestTimeout      no answer within the timeout: a hang
               └── GuestAgentError   the command channel broke
"""

from __future__ import annotations

import shlex

# The exit statuses are harness/outcome.py's (the one place that decides them); they are
# named here too because every exception below carries one.
from harness.outcome import EXIT_FINDING as EXIT_FINDING
from harness.outcome import EXIT_HARNESS as EXIT_HARNESS
from harness.outcome import EXIT_INPUT as EXIT_INPUT
from harness.outcome import EXIT_OK as EXIT_OK


class CrashlabError(Exception):
    """Base of every error the CLI reports without a traceback."""

    exit_status = EXIT_HARNESS

    def __init__(self, message: str, *, hint: str | None = None, detail: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.detail = detail

    def __str__(self) -> str:
        return self.message

    def excerpt(self, limit: int) -> str:
        """The message whole, then as much of the detail's end as ``limit`` leaves: the
        detail ends with what says most (a console's last lines), but only the message
        says why -- a guest that did not start has QEMU's command line for its detail."""
        room = max(0, limit - len(self.message) - 1)
        tail = (self.detail or "")[-room:] if room else ""
        return f"{self.message}\n{tail}"


class NotRun(CrashlabError):
    """A scenario this kernel cannot run: an out-of-tree module it needs (ZFS, dm-dust)
    is not built for it. Like fstests' ``_notrun``: reported with the reason, and neither a
    failure nor a finding; no run is recorded."""

    exit_status = EXIT_OK


class InputError(CrashlabError):
    """Bad input: a file, key or value the user can fix."""

    exit_status = EXIT_INPUT


class HarnessError(CrashlabError):
    """The lab failed; says nothing about the filesystem under test."""

    exit_status = EXIT_HARNESS


class ToolMissing(HarnessError):
    def __init__(self, tool: str, package: str | None):
        hint = (
            f"install it with: apt-get install {package}  (or run scripts/install-host-deps)"
            if package
            else "install it and make sure it is on PATH"
        )
        super().__init__(f"required program {tool!r} was not found", hint=hint)
        self.tool = tool
        self.package = package


def _tail(output: str, lines: int = 15) -> list[str]:
    return output.strip().splitlines()[-lines:]


class CommandFailed(HarnessError):
    def __init__(self, argv: list[str], returncode: int, stdout: str, stderr: str):
        super().__init__(
            f"command failed with exit status {returncode}: {argv[0]}",
            detail="\n".join(["$ " + " ".join(argv), *_tail(stderr or stdout)]),
        )
        self.argv = argv
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


class CommandTimeout(HarnessError):
    """A host command ran past its timeout (and was killed): a hang, the lab's
    ``timeout`` outcome where it is judged. A harness failure (exit 3), never a finding:
    the filesystem may be slow or the host overloaded. ``output`` is the tail of what
    the command printed before it was stopped."""

    def __init__(self, argv: list[str], timeout: float | None, output: str = ""):
        self.argv = argv
        self.timeout = timeout
        self.output = "\n".join(_tail(output))
        super().__init__(
            f"command timed out after {timeout} s: {argv[0]}",
            detail="\n".join(["$ " + shlex.join(argv), *_tail(output)]),
        )


class ImageError(HarnessError):
    pass


class GuestMessageError(HarnessError):
    """A guest program printed what the contract (harness/model/contract.py) cannot read:
    the lab's failure (a program and the host out of step), never a finding."""

    def __init__(self, program: str, field: str, reason: str, output: str) -> None:
        shown = output if len(output) <= 1200 else f"{output[:600]}\n...\n{output[-600:]}"
        super().__init__(
            f"{program} answered what the host cannot read: {field}: {reason}",
            detail=f"its output:\n{shown}",
        )
        self.program = program
        self.field = field
        self.output = output


class GuestError(HarnessError):
    """The guest did not do what it was asked; ``console`` holds the console tail."""

    def __init__(self, message: str, *, console: str = "", hint: str | None = None):
        super().__init__(message, hint=hint, detail=console or None)
        self.console = console


class GuestBootFailed(GuestError):
    pass


class GuestPanic(GuestError):
    pass


class GuestTimeout(GuestError):
    pass


class GuestAgentError(GuestError):
    pass
