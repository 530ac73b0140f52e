"""The command line as a user meets it: bad input is exit 2 with a message, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main as cli

REPO = Path(__file__).resolve().parent.parent


def scenario(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )


def test_unknown_subcommand_is_usage_error() -> None:
    r = scenario("frobnicate")
    assert r.returncode == 2
    assert "usage:" in r.stderr and "Traceback" not in r.stderr


def test_vm_run_without_command() -> None:
    r = scenario("vm", "run", "--disk", "64M")
    assert r.returncode == 2
    assert "no command given" in r.stderr and "Traceback" not in r.stderr


def test_vm_run_bad_disk() -> None:
    r = scenario("vm", "run", "--disk", "lots", "--", "true")
    assert r.returncode == 2
    assert "'lots'" in r.stderr and "hint" in r.stderr


def test_unknown_scenario_names_close_ones() -> None:
    r = scenario("run", "ext4-ordred-fsync")
    assert r.returncode == 2
    assert "ext4-ordered-fsync" in r.stderr and "Traceback" not in r.stderr


def test_missing_tool_names_its_package(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    from harness import tools

    monkeypatch.setattr(tools, "_search_path", lambda: "/nonexistent")
    status = cli.main(["doctor"])
    out = capsys.readouterr()
    assert status == 3
    assert "apt-get install qemu-system-x86" in out.out + out.err
    assert cli.main(["doctor", "--json"]) == 3
    got = json.loads(capsys.readouterr().out)
    qemu = next(c for c in got["checks"] if c["check"] == "qemu-system-x86_64")
    assert got["missing"] and qemu == {
        "check": "qemu-system-x86_64",
        "status": "missing",
        "detail": "apt-get install qemu-system-x86",
    }
