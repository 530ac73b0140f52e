"""The disposable guest, booted for real (TCG here): commands, disks, files, panic, hang;
on both backends (QEMU and a transient libvirt domain) where the test takes ``vm_backend``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from harness.errors import GuestBootFailed, GuestPanic, GuestTimeout, HarnessError, InputError
from harness.image import build as image
from harness.vm import backend
from harness.vm.backend import Disk, GuestSpec, start_guest

# exclusive: asserts on every libvirt domain of the host (make test runs it alone).
pytestmark = [pytest.mark.vm, pytest.mark.exclusive]


@pytest.fixture(params=["qemu", "libvirt"])
def vm_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """``start_guest`` on each backend in turn."""
    backend.select(request.param)
    yield request.param
    backend._selected = None


def crashlab_domains() -> list[str]:
    r = subprocess.run(
        ["virsh", "-c", "qemu:///system", "list", "--all", "--name"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [n for n in r.stdout.split() if n.startswith("crashlab-")]


def test_command_disks_and_files(guest_image: image.Image, tmp_path: Path, vm_backend: str) -> None:
    disk = tmp_path / "scratch.raw"
    disk.write_bytes(b"")
    with open(disk, "wb") as f:
        f.truncate(64 << 20)
    spec = GuestSpec(disks=(Disk(disk, "scratch"),))
    with start_guest(spec) as guest:
        # A command's own exit status and output come back untouched.
        r = guest.run(["sh", "-c", "echo out; echo err >&2; exit 7"])
        assert (r.exitcode, r.out, r.err) == (7, "out\n", "err\n")
        # The disk is found by its serial, with the size the host gave it.
        dev = guest.run(["readlink", "-f", guest.disk("scratch")], check=True).out.strip()
        size = guest.run(["blockdev", "--getsize64", dev], check=True).out.strip()
        assert int(size) == 64 << 20
        # Files both ways, binary-safe.
        payload = bytes(range(256)) * 4096
        guest.write_file("/tmp/payload", payload)
        assert (
            guest.run(["sha256sum", "/tmp/payload"], check=True).out.split()[0]
            == __import__("hashlib").sha256(payload).hexdigest()
        )
        assert guest.read_file("/tmp/payload") == payload
        # What the guest writes to the disk reaches the host's file.
        guest.run(
            ["sh", "-c", f"printf crashlab | dd of={dev} bs=512 seek=1 conv=fsync"], check=True
        )
        uname = guest.run(["uname", "-r"], check=True).out.strip()
        assert uname == guest_image.manifest["kernel"]
        # A crash (kill) keeps what the guest wrote and fsync'd; the guest is gone.
        guest.kill()
        with pytest.raises(GuestBootFailed, match="the guest is gone"):
            guest.run(["true"], timeout=5)
    if vm_backend == "libvirt":
        assert crashlab_domains() == []
    with open(disk, "rb") as f:
        f.seek(512)
        assert f.read(8) == b"crashlab"


def test_disk_hotplug(tmp_path: Path, vm_backend: str) -> None:
    """A disk plugged into the running guest is found by its serial like a boot-time one,
    holds what the guest writes, and is gone from the guest once unplugged."""
    boot_disk = tmp_path / "boot.raw"
    hot = tmp_path / "hot.raw"
    for p in (boot_disk, hot):
        with open(p, "wb") as f:
            f.truncate(48 << 20)
    seen = ["sh", "-c", "cat /sys/block/vd*/serial; echo; ls /dev/disk/by-id/"]
    spec = GuestSpec(disks=(Disk(boot_disk, "boot"),), hotplug_ports=1)
    with start_guest(spec) as guest:
        path = guest.attach_disk(Disk(hot, "hot"))
        assert path == guest.disk("hot")
        assert guest.run(["blockdev", "--getsize64", path], check=True).out.strip() == str(48 << 20)
        guest.run(
            ["sh", "-c", f"printf hotplug | dd of={path} bs=512 seek=3 conv=fsync"], check=True
        )
        # Bad requests change nothing in the guest.
        with pytest.raises(InputError, match="already in use"):
            guest.attach_disk(Disk(hot, "boot"))
        with pytest.raises(HarnessError, match="all 1 hotplug ports"):
            guest.attach_disk(Disk(boot_disk, "more"))
        with pytest.raises(HarnessError, match="does not exist"):
            guest.attach_disk(Disk(tmp_path / "missing.raw", "gone"))
        with pytest.raises(InputError, match="not hot-plugged") as exc:
            guest.detach_disk("boot")
        assert "root PCIe bus" in (exc.value.hint or "")
        guest.detach_disk("hot")
        out = guest.run(seen, check=True).out
        assert "hot" not in out and "virtio-boot" in out
        # The port is free again: the same file under another serial, read-only.
        path = guest.attach_disk(Disk(hot, "again", readonly=True))
        assert guest.run(["blockdev", "--getro", path], check=True).out.strip() == "1"
        r = guest.run(["dd", f"if={path}", "bs=512", "skip=3", "count=1", "status=none"])
        assert r.out.startswith("hotplug")
        guest.detach_disk("again")
        assert "again" not in guest.run(seen, check=True).out
    with open(hot, "rb") as f:
        f.seek(3 * 512)
        assert f.read(7) == b"hotplug"


def test_disks_plug_in_and_out_together(tmp_path: Path, vm_backend: str) -> None:
    """Several disks plugged with one wait, each at its serial with its own size, and
    unplugged together; a disk still in the guest keeps its link."""
    disks = []
    for i, mib in enumerate((48, 64, 80)):
        path = tmp_path / f"d{i}.raw"
        with open(path, "wb") as f:
            f.truncate(mib << 20)
        disks.append(Disk(path, f"d{i}", format="raw"))
    size = "for d in {}; do blockdev --getsize64 $d; done"
    with start_guest(GuestSpec(hotplug_ports=3)) as guest:
        paths = guest.attach_disks(disks)
        assert paths == [guest.disk(d.serial) for d in disks]
        out = guest.run(["sh", "-c", size.format(" ".join(paths))], check=True).out.split()
        assert out == [str(m << 20) for m in (48, 64, 80)]
        guest.detach_disks(["d0", "d2"])
        links = guest.run(["ls", "/dev/disk/by-id/"], check=True).out.split()
        assert "virtio-d1" in links and not {"virtio-d0", "virtio-d2"} & set(links)
        assert set(guest.hotplugged) == {"d1"}


def test_panic_is_reported_as_panic(vm_backend: str) -> None:
    with start_guest(GuestSpec()) as guest, pytest.raises(GuestPanic) as exc:
        guest.run(["sh", "-c", "echo c > /proc/sysrq-trigger"], timeout=60)
    assert "panic" in exc.value.message.lower() or "oops" in exc.value.message.lower()
    assert "sysrq" in exc.value.console.lower()


def test_frozen_guest_is_a_hang(vm_backend: str) -> None:
    from harness.vm.libvirt import LibvirtGuest
    from harness.vm.qemu import QemuGuest

    with start_guest(GuestSpec()) as guest:
        # The vCPUs stop: the agent can no longer answer.
        if isinstance(guest, QemuGuest):
            guest.qmp("stop")
        else:
            assert isinstance(guest, LibvirtGuest)
            guest.domain.suspend()
        with pytest.raises(GuestTimeout) as exc:
            guest.run(["true"], timeout=3)
        assert "hang" in (exc.value.hint or "")


def test_hang_is_a_timeout_not_a_failure() -> None:
    with start_guest(GuestSpec()) as guest:
        start = time.monotonic()
        with pytest.raises(GuestTimeout):
            guest.run(["sleep", "600"], timeout=3)
        assert time.monotonic() - start < 30


def test_a_work_directory_too_long_for_a_socket_name(tmp_path: Path) -> None:
    """QEMU's sockets are in the guest's work directory; under a long TMPDIR (pytest's with
    xdist workers, a lab host of tests/netlab.py) their paths pass the 107 bytes a socket's
    name holds, and QEMU would not start ("Path must be less than 108 bytes")."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    assert len(str(deep / "qmp.sock")) > 107
    backend.select("qemu")
    try:
        with start_guest(GuestSpec(workdir=deep)) as guest:
            assert guest.run(["echo", "hi"], check=True).out == "hi\n"  # the agent's socket
            assert guest.qmp("query-status")["status"] == "running"  # QMP's
    finally:
        backend._selected = None


def test_many_disks_behind_bridges(guest_image: image.Image, tmp_path: Path) -> None:
    """A large check batch: more disks than the root PCIe bus has slots."""
    disks = []
    for i in range(40):
        p = tmp_path / f"d{i}.raw"
        with open(p, "wb") as f:
            f.truncate((1 + i) << 20)
        disks.append(Disk(p, f"b{i}"))
    with start_guest(GuestSpec(disks=tuple(disks))) as guest:
        out = guest.run(
            [
                "sh",
                "-c",
                "for i in $(seq 0 39); do blockdev --getsize64 /dev/disk/by-id/virtio-b$i; done",
            ],
            check=True,
        ).out.split()
    assert [int(x) for x in out] == [(1 + i) << 20 for i in range(40)]


def test_a_boot_that_never_answers_is_tried_once_more_then_a_timeout(
    caplog: pytest.LogCaptureFixture, vm_backend: str
) -> None:
    """No guest answers its agent within 1 s under TCG: two boots, then the lab's
    timeout, and no QEMU (nor libvirt domain) left behind."""

    def qemus() -> int:
        """This test's QEMUs (the qemu backend's are its children; libvirt's are counted
        as domains): another xdist worker's guests come and go meanwhile."""
        n = 0
        for p in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):  # gone meanwhile
                n += "qemu-system" in " ".join(p.cmdline())
        return n

    before = qemus()
    caplog.set_level("WARNING", logger="crashlab.qemu")
    with pytest.raises(GuestTimeout, match="did not answer within 1 s of boot"):  # noqa: SIM117
        with start_guest(GuestSpec(boot_timeout=1.0)):
            pass
    assert sum("booting a fresh guest once more" in r.message for r in caplog.records) == 1
    assert qemus() == before
    if vm_backend == "libvirt":
        assert crashlab_domains() == []


def test_a_killed_harness_takes_its_guest_with_it() -> None:
    """kill -9 of the harness mid-boot: its QEMU dies too (the kernel's parent-death
    signal, what libvirt's AUTODESTROY gives its domains), so no orphan holds the disks'
    write locks against the rerun."""
    import os
    import signal
    import sys

    script = (
        "from harness.vm.backend import GuestSpec, start_guest\n"
        "start_guest(GuestSpec()).__enter__()"
    )
    harness = subprocess.Popen(
        [sys.executable, "-c", script], env={**os.environ, "CRASHLAB_BACKEND": "qemu"}
    )
    try:
        deadline = time.monotonic() + 60
        qemu = ""
        while not qemu and time.monotonic() < deadline:
            time.sleep(0.2)
            r = subprocess.run(
                ["pgrep", "-P", str(harness.pid), "-f", "qemu-system"],
                capture_output=True,
                text=True,
            )
            qemu = r.stdout.strip()
        assert qemu, "the harness never started QEMU"
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        deadline = time.monotonic() + 30
        while _alive(qemu) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(qemu), f"QEMU {qemu} outlived its harness"
    finally:
        harness.kill()


def _alive(pid: str) -> bool:
    """Running, not a zombie its new parent has yet to reap."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_media_caps_a_disks_rates_at_boot_and_when_plugged(tmp_path: Path) -> None:
    """An HDD-like disk serves about its 120 random reads a second, plugged at boot or
    later (QEMU's throttling), where the same file unthrottled serves many more."""
    from harness.vm import media

    files = {}
    for name in ("plain", "hdd", "hot"):
        files[name] = tmp_path / f"{name}.raw"
        with open(files[name], "wb") as f:
            f.truncate(64 << 20)
    spec = GuestSpec(
        disks=(Disk(files["plain"], "plain"), Disk(files["hdd"], "hdd", media="hdd")),
        hotplug_ports=1,
    )

    def iops(path: str) -> float:
        job = ["fio", "--name=r", f"--filename={path}", "--rw=randread", "--bs=4k"]
        job += ["--direct=1", "--time_based", "--runtime=4", "--output-format=json"]
        out = json.loads(guest.run(job, check=True, timeout=120).out)
        return float(out["jobs"][0]["read"]["iops"])

    cap = media.LIMITS[media.Media.HDD].iops
    with start_guest(spec) as guest:
        measured = {"plain": iops(guest.disk("plain")), "hdd": iops(guest.disk("hdd"))}
        measured["hot"] = iops(guest.attach_disk(Disk(files["hot"], "hot", media="hdd")))
    assert measured["hdd"] <= cap * 1.2 and measured["hot"] <= cap * 1.2, measured
    assert measured["plain"] > 2 * cap, measured
