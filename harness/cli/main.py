"""The ``scenario`` command: argparse front end. Each command group lives in its own module
and adds itself with ``register(subparsers)``; this module only parses and reports errors.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence

from harness import errors, outcome
from harness.cli import ui
from harness.report.markup import esc

err_console = ui.console(stderr=True)


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with usage on bad input (its default), never a traceback."""


def build_parser() -> argparse.ArgumentParser:
    from harness.cli import (
        campaign as cli_campaign,
    )
    from harness.cli import checklog as cli_checklog
    from harness.cli import clean as cli_clean
    from harness.cli import (
        image as cli_image,
    )
    from harness.cli import (
        importer as cli_importer,
    )
    from harness.cli import kernel as cli_kernel
    from harness.cli import (
        lab as cli_lab,
    )
    from harness.cli import (
        results as cli_results,
    )
    from harness.cli import triage as cli_triage
    from harness.cli import (
        vm as cli_vm,
    )

    p = _Parser(prog="scenario", description="crashlab: crash-consistency fault-injection lab")
    p.add_argument("--debug", action="store_true", help="verbose log and full command lines")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    cli_lab.register(sub)
    cli_image.register(sub)
    cli_kernel.register(sub)
    cli_vm.register(sub)
    cli_results.register(sub)
    cli_campaign.register(sub)
    cli_importer.register(sub)
    cli_checklog.register(sub)
    cli_triage.register(sub)
    cli_clean.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()  # imports every command: a Ctrl-C lands here often
    except KeyboardInterrupt:
        return outcome.EXIT_INTERRUPTED
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="%(asctime)s %(name)s: %(message)s",
    )
    if not args.debug:
        # qemu.qmp logs a failed connection at ERROR before raising it; the harness
        # reports what it raises (a harness error, or nothing after a Ctrl-C that tore the
        # guest down mid-connect), so the line only alarmed: seen at a chaos SIGINT.
        logging.getLogger("qemu.qmp").setLevel(logging.CRITICAL)
    stop_on_sigterm()
    try:
        status: int = args.func(args)
        return status
    except errors.CrashlabError as e:
        report(e, debug=args.debug)
        return e.exit_status
    except KeyboardInterrupt:
        err_console.print(
            "[yellow]interrupted[/]: finished results are in the store; run again to resume"
        )
        return outcome.EXIT_INTERRUPTED
    except BrokenPipeError:
        # `scenario show X | head`: the reader went away; nothing left to say to it.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return errors.EXIT_OK
    except Exception as e:
        from harness.store.opening import store_failure

        # The host failing the store (a full disk, a held lock) is a harness error; any
        # other exception is a bug of ours: exit 3 like every harness failure (1 would
        # page someone about a filesystem finding), the traceback to a file, or to the
        # terminal with --debug.
        failure = store_failure(e)
        if failure is None:
            return lab_bug(debug=args.debug)
        report(failure)
        return errors.EXIT_HARNESS


def stop_on_sigterm() -> None:
    """SIGTERM (kill, a service manager, a CI timeout) stops a run as Ctrl-C does: the
    guest is destroyed, the run marked interrupted and resumable. Python's default would
    end the process on the spot and leave the run 'running'. Forked children (the host
    checks' multiprocessing workers) inherit the handler; a pool stops its workers with
    SIGTERM, so in them it is the default again: die, no KeyboardInterrupt traceback."""
    import os

    pid = os.getpid()

    def interrupt(signum: int, frame: object) -> None:
        if os.getpid() != pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def lab_bug(*, debug: bool) -> int:
    import tempfile
    import traceback

    text = traceback.format_exc()
    with tempfile.NamedTemporaryFile("w", prefix="crashlab-bug-", suffix=".txt", delete=False) as f:
        f.write(text)
    last = text.strip().splitlines()[-1]
    err_console.print("[bold red]harness error (a crashlab bug):[/] ", end="")
    err_console.print(last, markup=False)
    if debug:
        err_console.print(text, markup=False)
    err_console.print(f"[cyan]hint:[/] the traceback is in {esc(f.name)}; please report it")
    return errors.EXIT_HARNESS


def report(e: errors.CrashlabError, *, debug: bool = False) -> None:
    kind = "error" if isinstance(e, errors.InputError) else "harness error"
    # Messages and hints carry paths and values: only our own prefix is markup.
    if isinstance(e, errors.NotRun):
        err_console.print(f"[bold yellow]not run:[/] {esc(e.message)}")
    else:
        err_console.print(f"[bold red]{kind}:[/] {esc(e.message)}")
    if e.detail:
        lines = e.detail.rstrip().splitlines()
        for line in lines if debug else lines[-20:]:
            err_console.print("  " + line, markup=False)
    if e.hint:
        err_console.print(f"[cyan]hint:[/] {esc(e.hint)}")


if __name__ == "__main__":
    sys.exit(main())
