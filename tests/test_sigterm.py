"""SIGTERM stops ``scenario`` as Ctrl-C does (issue 26): the run is marked interrupted,
what it finished stays, the command exits 130 without a traceback, and a second run
resumes it. A real host-only check-log run of the recorded ext4 fixture
(tests/data/logs/README.md); the signal is sent by the process to itself right after its
first crash state is stored, the moment a kill from outside would land."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from harness import proc
from harness.cli.main import main, stop_on_sigterm
from harness.store.db import Store
from tests.synth import without_image


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


def test_sigterm_marks_the_run_interrupted_and_it_resumes(
    ext4_small: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    without_image(tmp_path, monkeypatch)
    db = tmp_path / "lab.sqlite"
    argv = ["check-log", str(ext4_small[0]), "--fs", "ext4", "--device-size", "32M"]
    argv += ["--host-only", "--max-states", "6", "--db", str(db)]
    record = Store.record_state_result

    def record_then_term(self: Store, *a: Any, **kw: Any) -> Any:
        done = record(self, *a, **kw)
        monkeypatch.setattr(Store, "record_state_result", record)
        os.kill(os.getpid(), signal.SIGTERM)
        return done

    monkeypatch.setattr(Store, "record_state_result", record_then_term)
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert main(argv) == 130
        err = capsys.readouterr().err
        assert "interrupted" in err and "Traceback" not in err
        [(run_id, status)] = rows(db, "SELECT id, status FROM runs")
        assert status == "interrupted"
        assert rows(db, "SELECT count(*) FROM verdicts") == [(1,)]
        assert main(argv) == 0
    finally:
        signal.signal(signal.SIGTERM, before)
    assert rows(db, "SELECT id, status FROM runs") == [(run_id, "done")]
    assert rows(db, "SELECT count(*), count(DISTINCT state_id) FROM verdicts") == [(6, 6)]


def test_a_forked_worker_still_dies_of_sigterm() -> None:
    """multiprocessing stops its pool's workers with SIGTERM: a worker forked from the CLI
    must die of it, not raise KeyboardInterrupt with a traceback on the terminal."""
    before = signal.getsignal(signal.SIGTERM)
    try:
        stop_on_sigterm()
        ctx = multiprocessing.get_context("fork")
        ready = ctx.Event()
        child = ctx.Process(target=_wait, args=(ready,))
        child.start()
        # A signal between fork and CPython's after-fork reset would be dropped by it.
        assert ready.wait(timeout=30)
        child.terminate()  # SIGTERM
        child.join(timeout=30)
        assert child.exitcode == -signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    finally:
        signal.signal(signal.SIGTERM, before)


def _wait(ready: Any) -> None:
    ready.set()
    time.sleep(60)


def test_a_full_store_is_a_harness_error_not_a_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite's "database or disk is full" (seen by bench/chaos.py with the store on a full
    tmpfs) is the host's trouble: exit 3, said as such, no traceback file."""

    def full(*a: Any, **kw: Any) -> Any:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Store, "open", full)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert main(["results", "runs", "--db", str(tmp_path / "lab.sqlite")]) == 3
    err = capsys.readouterr().err
    assert "the results store failed: database or disk is full" in err
    assert "crashlab bug" not in err and not list(tmp_path.glob("crashlab-bug-*"))


def test_ctrl_c_at_the_terminal_does_not_reach_a_check_command() -> None:
    """Ctrl-C signals the terminal's process group; a command of proc.run is in a group of
    its own, so an e2fsck is never cut short mid-replay and its half-done work judged."""
    r = proc.run(["sh", "-c", "ps -o pgid= -p $$"])
    assert int(r.stdout) != os.getpgrp()


ORPHAN = """
import multiprocessing, sys, time
from harness import proc

def work():
    proc.end_with_parent()
    time.sleep(60)

child = multiprocessing.get_context("fork").Process(target=work)
child.start()
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_forked_check_worker_dies_with_a_killed_harness() -> None:
    """SIGKILL of the harness left its host-check workers running as orphans."""
    import subprocess
    import sys

    parent = subprocess.Popen([sys.executable, "-c", ORPHAN], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    time.sleep(0.5)  # past the child's prctl
    parent.kill()
    parent.wait()
    for _ in range(50):
        if not Path(f"/proc/{child}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists()


def test_a_store_locked_past_the_busy_timeout_is_a_harness_error(tmp_path: Path) -> None:
    """Another writer holding the store (chaos.py's store-lock fault) is the host's doing:
    exit 3, never exit 2 with the advice to move the results file away."""
    from harness.errors import HarnessError
    from harness.store.opening import _adopt

    db = tmp_path / "lab.sqlite"
    holder = sqlite3.connect(db, isolation_level=None)  # a new file: no WAL yet
    holder.execute("BEGIN EXCLUSIVE")
    waiter = sqlite3.connect(db, timeout=0.1, isolation_level=None)
    try:
        with pytest.raises(HarnessError, match="database is locked"):
            _adopt(db, waiter)
    finally:
        waiter.close()
        holder.execute("ROLLBACK")
        holder.close()


def test_ctrl_c_while_the_cli_starts_is_quiet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Ctrl-C in the first half second (the commands' imports) printed a traceback."""

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("harness.cli.main.build_parser", interrupted)
    assert main(["list"]) == 130
    assert "Traceback" not in capsys.readouterr().err
