"""``scenario lab clean`` on real leftovers: a QEMU of the lab whose harness is gone (a
real, idle qemu-system process reparented away from its shell), old guest work
directories and a dead Dask worker's cache are removed; a guest a live harness owns, a
work directory a harness just made and anything not named by the lab are left alone."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from harness import proc
from harness.cli.main import main
from harness.vm import leftovers, overlays

# exclusive: `lab clean` looks at every QEMU of the host (make test runs it alone).
pytestmark = pytest.mark.exclusive

QEMU = ["qemu-system-x86_64", "-machine", "none", "-display", "none", "-S", "-nodefaults"]


def _alive(pid: int) -> bool:
    return leftovers._parent(pid) != 0


def _orphan(name: str) -> int:
    """An idle QEMU whose parent exits at once, as a SIGKILLed harness's guest would be."""
    out = subprocess.run(
        ["sh", "-c", f"{' '.join(QEMU)} -name {name} >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out)


def test_lab_clean_removes_only_what_killed_harnesses_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("CRASHLAB_CACHE", str(tmp_path / "cache"))  # no overlays of others
    old, young = tmp_path / "crashlab-vm-old", tmp_path / "crashlab-vm-young"
    for d in (old, young, tmp_path / "crashlab-dask-999999999", tmp_path / "other-vm-old"):
        d.mkdir()
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    os.utime(tmp_path / "other-vm-old", (time.time() - 3600, time.time() - 3600))
    orphan = _orphan("crashlab-leftover-test")
    stranger = _orphan("not-ours")
    try:
        with proc.spawn([*QEMU, "-name", "crashlab-owned"]) as owned:
            time.sleep(0.5)
            assert main(["lab", "clean", "--dry-run", "--json"]) == 0
            dry = json.loads(capsys.readouterr().out)["leftovers"]
            assert main(["lab", "clean", "--json"]) == 0
            done = json.loads(capsys.readouterr().out)["leftovers"]
            assert dry == done
            what = {(f["kind"], f["what"]) for f in done}
            assert ("guest", str(orphan)) in what
            assert ("guest", str(owned.popen.pid)) not in what
            assert ("guest", str(stranger)) not in what
            assert {p for k, p in what if k == "workdir"} == {
                str(old),
                str(tmp_path / "crashlab-dask-999999999"),
            }
            assert _alive(owned.popen.pid) and _alive(stranger)
        deadline = time.monotonic() + 15
        while _alive(orphan) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(orphan)
        assert not old.exists() and young.exists() and (tmp_path / "other-vm-old").exists()
        assert main(["lab", "clean", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["leftovers"] == []
    finally:
        for pid in (orphan, stranger):
            if _alive(pid):
                os.kill(pid, 9)


def test_a_libvirt_guests_root_overlay_is_left_while_its_qemu_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Overlays made as a guest boots (harness/vm/overlays.py, real qemu-img): one named
    by a running QEMU, one just made, and one old and unused, which alone is a leftover;
    a libvirt-run QEMU (its parent is never the harness) is not an orphan."""
    monkeypatch.setenv("CRASHLAB_CACHE", str(tmp_path))
    base = tmp_path / "rootfs.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(base), "64M"], check=True)
    running, young, killed = (overlays.create(f"crashlab-{c * 12}", base) for c in "abc")
    assert running.parent == overlays.overlay_dir()
    assert running.name == "crashlab-aaaaaaaaaaaa-crashlab-root.qcow2"
    (tmp_path / "overlays" / "notes.qcow2").write_bytes(b"")  # not named by the lab
    for f in (running, killed, tmp_path / "overlays" / "notes.qcow2"):
        os.utime(f, (time.time() - 3600, time.time() - 3600))
    # libvirt's QEMU: -name guest=..., its overlay in a -blockdev, daemonized (parent 1).
    libvirt_qemu = [
        "/usr/bin/qemu-system-x86_64", "-name", "guest=crashlab-aaaaaaaaaaaa,debug-threads=on",
        "-blockdev", f'{{"driver":"file","filename":"{running}","node-name":"libvirt-2"}}',
    ]  # fmt: skip
    procs = {1: ["/sbin/init"], 4242: libvirt_qemu}
    found = leftovers.root_overlays(procs)
    assert [(f.kind, f.what) for f in found] == [("overlay", str(killed))]
    assert leftovers.guests(procs) == []
    leftovers.remove(found)
    assert not killed.exists() and running.exists() and young.exists()
