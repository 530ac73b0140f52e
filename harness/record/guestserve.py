"""A guest program started once per guest and asked once per request (its side:
harness/guest/fifoserve.py): starting Python and importing a guest program costs about
a second per request under TCG, the shell that hands one line over a tenth of that."""

from __future__ import annotations

from collections.abc import Sequence

from harness.record import recorder as record
from harness.vm.agent import ExecResult
from harness.vm.backend import Guest

# The program lives as long as the guest: its own session, no terminal, its output in
# a file (``folder/out``), so the agent's command returns at once. The FIFOs are made
# before it returns: a request written before ``req`` existed would make it a file.
START = (
    'd=$1; shift; mkdir -p "$d" && mkfifo "$d/req" "$d/resp"'
    ' && { setsid python3 "$@" "$d" </dev/null >"$d/out" 2>&1 & }'
)
# One request in, its one-line answer out.
ASK = 'printf "%s\\n" "$1" > "$2/req" && cat "$2/resp"'


def start(guest: Guest, folder: str, program: str, args: Sequence[str] = ()) -> None:
    """Start ``program`` (a guest program, installed by ``record.install_scripts``) as
    ``python3 program *args folder``, serving requests in ``folder`` until the guest
    is gone."""
    argv = ["sh", "-c", START, "sh", folder, f"{record.GUEST_DIR}/{program}", *args]
    guest.run(argv, check=True)


def ask(guest: Guest, folder: str, request: str, timeout: float) -> ExecResult:
    """The server in ``folder``'s answer to ``request`` (one line), as the guest ran
    the asking command: its exit status and what it printed."""
    return guest.run(["sh", "-c", ASK, "sh", request, folder], timeout=timeout)
