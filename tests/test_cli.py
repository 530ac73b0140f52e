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

    monkeypatch.setattr(tools, "_search_path", lambda lab=None: "/nonexistent")
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


def test_doctor_says_whose_fsck_jfs_the_host_checks_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Debian 12's fsck.jfs cannot replay a JFS log; doctor says whether the lab's build
    (paths.lab_bin) is the one the host checks find first."""
    from harness import paths, tools
    from harness.image import build as image

    monkeypatch.setattr(paths, "lab_bin", lambda: tmp_path / "bin")
    monkeypatch.setattr(image, "cached", lambda *a: None)  # no probe boot here

    def jfs() -> dict[str, str]:
        cli.main(["doctor", "--json"])
        checks = json.loads(capsys.readouterr().out)["checks"]
        return next(c for c in checks if c["check"] == "fsck.jfs")

    if not tools.available("fsck.jfs"):
        pytest.skip("no fsck.jfs on this host (jfsutils)")
    assert jfs()["status"] == "Debian's"
    (tmp_path / "bin").mkdir()
    lab = tmp_path / "bin" / "fsck.jfs"
    lab.write_text("#!/bin/sh\n")
    lab.chmod(0o755)
    assert jfs()["status"] == "lab build"
