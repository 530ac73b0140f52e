"""proc raises its own CommandTimeout (a harness failure, exit 3) for a command that
runs past its timeout, never subprocess's TimeoutExpired."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from harness import proc
from harness.errors import EXIT_HARNESS, CommandTimeout, HarnessError


def test_run_past_its_timeout_raises_command_timeout_with_argv_and_output() -> None:
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout) as ei:
        proc.run(["sh", "-c", "echo started; echo oops >&2; exec sleep 30"], timeout=0.5)
    assert time.monotonic() - t0 < 10  # killed, not waited for
    e = ei.value
    assert isinstance(e, HarnessError) and e.exit_status == EXIT_HARNESS
    assert not isinstance(e, subprocess.TimeoutExpired)
    assert e.argv[0] == "sh" and e.timeout == 0.5
    assert "oops" in e.output
    assert "timed out after 0.5 s" in e.message and e.detail and "sleep 30" in e.detail


def test_run_with_a_logfile_keeps_the_logfile_tail(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    with pytest.raises(CommandTimeout) as ei:
        proc.run(["sh", "-c", "echo step one; exec sleep 30"], timeout=0.5, logfile=log)
    assert "step one" in ei.value.output


def test_a_real_sleep_with_a_tiny_timeout() -> None:
    with pytest.raises(CommandTimeout) as ei:
        proc.run(["sleep", "5"], timeout=0.05)
    assert ei.value.argv == ["sleep", "5"]


def test_spawned_child_wait_raises_command_timeout(tmp_path: Path) -> None:
    with proc.spawn(["sleep", "30"], output=tmp_path / "out", grace=1) as child:
        with pytest.raises(CommandTimeout) as ei:
            child.wait(0.1)
        assert ei.value.argv == ["sleep", "30"] and child.alive()
    assert not child.alive()
