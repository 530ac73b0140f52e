"""A campaign every night, left alone (issue 48): the systemd service and timer units, or
the cron line for a host without systemd, that ``scenario lab schedule`` prints or
installs.

The unit runs the checkout's own ``scenario`` from its venv, in the checkout, with the
cache the campaign's kernels and image live in (``docs/hosts.md``: the environment a
Dask worker needs is the same). Exit statuses are the campaign's: 0 nothing found, 1 a
finding -- the night did its work (``SuccessExitStatus=1``) -- and 2 or 3 the lab's own
failure, which systemd records as the unit failing.

A night still running when the next is due is not started twice: systemd does not start
an active oneshot service again (the timer's elapse is logged and skipped), and the
cron line holds a lock (``flock -n``) and says in its log that the night before is
still running. Neither is a failure of the lab; the campaign itself refuses a second
live start too (``campaign.runner``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from harness.errors import InputError

UNIT = "crashlab-nightly"
_AT = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


@dataclass(frozen=True)
class Schedule:
    checkout: Path  # the repository the units run in
    campaign: Path  # relative to the checkout, or absolute
    db: Path
    cache: Path
    at: str = "01:00"  # local time, HH:MM
    budget: str | None = None  # after each night, ``scenario lab prune`` to this size
    notify: str | None = None  # the digest's command (``campaign digest --notify``)

    def __post_init__(self) -> None:
        if not _AT.match(self.at):
            raise InputError(f"--at {self.at!r}: not a time of day", hint="HH:MM, e.g. 01:30")

    @property
    def argv(self) -> list[str]:
        """The night's command: the campaign, its store, its JUnit beside the store."""
        junit = self.db.with_name(f"{self.db.stem}-nightly.junit.xml")
        return [
            str(self.checkout / ".venv" / "bin" / "scenario"), "campaign", "run",
            str(self.campaign), "--db", str(self.db), "--junit", str(junit),
        ]  # fmt: skip

    def service(self) -> str:
        return "\n".join([
            "[Unit]",
            f"Description=crashlab nightly campaign ({self.campaign})",
            "After=network-online.target",
            "",
            "[Service]",
            "Type=oneshot",
            f"WorkingDirectory={self.checkout}",
            f"Environment=CRASHLAB_CACHE={self.cache}",
            f"ExecStart={shlex.join(self.argv)}",
            # After the night, whatever its end; "-": news (exit 1) is no failure of the unit.
            f"ExecStopPost=-{shlex.join(self.digest_argv)}",
            *([f"ExecStopPost=-{shlex.join(self.prune_argv)}"] if self.budget else []),
            "# 1: a finding -- the night did its work; 2 and 3 are the lab's own failures.",
            "SuccessExitStatus=1",
            "",
        ])  # fmt: skip

    @property
    def digest_argv(self) -> list[str]:
        """After the night, whatever its end: what changed since the one before."""
        notify = ["--notify", self.notify] if self.notify else []
        return [self.argv[0], "campaign", "digest", str(self.campaign), "--db", str(self.db),
                *notify]  # fmt: skip

    @property
    def prune_argv(self) -> list[str]:
        """After the night, whatever its end: the disk back within the budget."""
        return [self.argv[0], "lab", "prune", "--budget", str(self.budget), "--db", str(self.db)]

    def timer(self) -> str:
        return "\n".join([
            "[Unit]",
            "Description=crashlab nightly campaign, every night",
            "",
            "[Timer]",
            f"OnCalendar=*-*-* {self.at}:00",
            "# A night missed while the host was off runs at the next boot.",
            "Persistent=true",
            "",
            "[Install]",
            "WantedBy=timers.target",
            "",
        ])  # fmt: skip

    def cron(self) -> str:
        """One crontab line: the same command under a lock; a night that finds the one
        before still running says so in the log and does not start."""
        hour, minute = (int(x) for x in self.at.split(":"))
        lock = self.cache / f"{UNIT}.lock"
        log = self.db.with_name(f"{self.db.stem}-nightly.log")
        busy = f'echo "$(date -Is) {UNIT}: the night before is still running; not started"'
        after = [self.digest_argv, *([self.prune_argv] if self.budget else [])]
        night = "; ".join(shlex.join(a) for a in [self.argv, *after])
        run = (
            f"cd {shlex.quote(str(self.checkout))} && CRASHLAB_CACHE={shlex.quote(str(self.cache))}"
            f" flock -n -E 75 {shlex.quote(str(lock))} sh -c {shlex.quote(night)};"
            f" [ $? -eq 75 ] && {busy}"
        )
        return f"{minute} {hour} * * * ({run}) >> {shlex.quote(str(log))} 2>&1"


def systemd_running(run: Path = Path("/run/systemd/system")) -> bool:
    """Whether systemd is the init (sd_booted(3): its runtime directory exists)."""
    return run.is_dir()


def install(s: Schedule, root: Path = Path("/")) -> list[Path]:
    """Write the two units under ``root``'s /etc/systemd/system; the written paths."""
    where = root / "etc" / "systemd" / "system"
    where.mkdir(parents=True, exist_ok=True)
    out = []
    for suffix, text in ((".service", s.service()), (".timer", s.timer())):
        path = where / f"{UNIT}{suffix}"
        path.write_text(text)
        out.append(path)
    return out
