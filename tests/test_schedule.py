"""A campaign every night (``scenario lab schedule``, harness/campaign/schedule.py): the
systemd units pass systemd-analyze, the cron line's lock keeps a second night from
starting while the first runs -- and says so in the log -- and bad input is exit 2.
The night itself is a stand-in script (the real campaign takes hours)."""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path

import pytest

from harness.campaign import schedule
from harness.cli import main as cli
from harness.errors import InputError


def a_schedule(tmp_path: Path, night: str = "sleep 3") -> schedule.Schedule:
    """A checkout whose `scenario` is ``night`` (a shell line), and its schedule."""
    bin_dir = tmp_path / "checkout" / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "scenario").write_text(f'#!/bin/sh\necho "night: $*"\n{night}\n')
    (bin_dir / "scenario").chmod(0o755)
    (tmp_path / "cache").mkdir()
    camp = tmp_path / "checkout" / "nightly.toml"
    return schedule.Schedule(tmp_path / "checkout", camp, tmp_path / "r" / "lab.sqlite",
                             tmp_path / "cache", at="02:30")  # fmt: skip


def test_the_units_pass_systemd_analyze(tmp_path: Path) -> None:
    s = a_schedule(tmp_path)
    units = schedule.install(s, tmp_path / "root")
    assert [p.name for p in units] == ["crashlab-nightly.service", "crashlab-nightly.timer"]
    service = units[0].read_text()
    assert f"WorkingDirectory={s.checkout}" in service and "SuccessExitStatus=1" in service
    assert "OnCalendar=*-*-* 02:30:00" in units[1].read_text()
    exec_line = next(x for x in service.splitlines() if x.startswith("ExecStart="))
    assert shlex.split(exec_line.removeprefix("ExecStart="))[1:4] == [
        "campaign", "run", str(s.campaign)
    ]  # fmt: skip
    r = subprocess.run(["systemd-analyze", "verify", *map(str, units)],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr


def test_a_night_still_running_keeps_the_next_from_starting(tmp_path: Path) -> None:
    s = a_schedule(tmp_path)
    s.db.parent.mkdir()
    command = s.cron().split(" ", 5)[5]  # the line without its five time fields
    assert s.cron().startswith("30 2 * * * ")
    first = subprocess.Popen(["/bin/sh", "-c", command])
    time.sleep(1)
    subprocess.run(["/bin/sh", "-c", command], check=False)
    first.wait()
    log = (s.db.parent / "lab-nightly.log").read_text()
    assert log.count("night: campaign run") == 1, log
    assert "the night before is still running; not started" in log


def test_bad_time_and_campaign_are_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(InputError, match="not a time of day"):
        schedule.Schedule(Path("/"), Path("x"), Path("y"), Path("z"), at="25:00")
    assert cli.main(["lab", "schedule", "--campaign", str(tmp_path / "nope.toml")]) == 2
    assert "no such campaign file" in capsys.readouterr().err
    assert cli.main(["lab", "schedule", "--cron", "--at", "03:15"]) == 0
    assert capsys.readouterr().out.startswith("15 3 * * * ")


def test_with_a_budget_each_night_ends_in_a_digest_and_a_prune(tmp_path: Path) -> None:
    s = a_schedule(tmp_path)
    s = schedule.Schedule(s.checkout, s.campaign, s.db, s.cache, s.at, budget="20G")
    posts = [x.removeprefix("ExecStopPost=-") for x in s.service().splitlines()
             if x.startswith("ExecStopPost=-")]  # fmt: skip
    assert [shlex.split(x)[1:3] for x in posts] == [["campaign", "digest"], ["lab", "prune"]]
    assert "lab prune --budget 20G" in s.cron() and "campaign digest" in s.cron()
    assert cli.main(["lab", "schedule", "--budget", "lots"]) == 2
