"""The libvirt backend without a guest: the generated domain XML (checked against libvirt's
own schema with virt-xml-validate), the backend choice and its bad input."""

from __future__ import annotations

import shlex
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.config import scenario
from harness.config.vm import Backend
from harness.errors import HarnessError, InputError
from harness.image.build import Image
from harness.vm import backend, libvirtd, overlays
from harness.vm.backend import HOTPLUG_PORTS, Disk, GuestSpec
from harness.vm.libvirt import LibvirtBackend, _target, domain_xml
from harness.vm.qemu import QemuBackend, qemu_argv


@pytest.fixture
def img(tmp_path: Path) -> Image:
    return Image(
        tmp_path,
        tmp_path / "rootfs.qcow2",
        tmp_path / "vmlinuz",
        tmp_path / "initrd.img",
        {"recipe_hash": "0123456789abcdef"},
    )


def _spec(tmp_path: Path, n: int = 4, **kw: object) -> GuestSpec:
    disks = [
        Disk(tmp_path / "a.raw", "plain"),
        Disk(tmp_path / "b.qcow2", "cow", format="qcow2", snapshot=True),
        Disk(tmp_path / "c.raw", "ro", readonly=True),
        Disk(tmp_path / "h.raw", "hdd", media="hdd"),  # an <iotune> for libvirt to accept
    ]
    disks += [Disk(tmp_path / f"x{i}.raw", f"x{i}") for i in range(n - 4)]
    return GuestSpec(disks=tuple(disks), **kw)  # type: ignore[arg-type]


def _parse(xml: str) -> ET.Element:
    return ET.fromstring(xml)


def test_domain_xml_is_valid_for_libvirt(img: Image, tmp_path: Path) -> None:
    """libvirt's own RelaxNG schema accepts the domain, bridges included."""
    out = tmp_path / "domain.xml"
    out.write_text(domain_xml(img, _spec(tmp_path, n=40), "tcg", "crashlab-t"))
    r = subprocess.run(["virt-xml-validate", str(out), "domain"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_libvirtd_accepts_the_domain(img: Image, tmp_path: Path) -> None:
    """libvirtd's own checks (device placement on the PCIe buses, disk options): the
    domain is defined, persistent and never started, then undefined; no guest boots."""
    spec = _spec(tmp_path, n=60)
    for d in spec.disks:
        d.path.touch()
    name = f"crashlab-unit-{tmp_path.name[-12:]}"
    conn = libvirtd.connect()
    try:
        dom = conn.defineXML(domain_xml(img, spec, "tcg", name))
        try:
            placed = ET.fromstring(dom.XMLDesc())
            assert len(placed.findall("devices/disk")) == 61
        finally:
            dom.undefine()
    finally:
        conn.close()


def test_domain_is_the_qemu_backends_guest(img: Image, tmp_path: Path) -> None:
    spec = _spec(tmp_path, udev=True, memory_mb=768, cpus=1)
    dom = _parse(domain_xml(img, spec, "tcg", "crashlab-t"))
    argv = qemu_argv(img, spec, "tcg", tmp_path)
    # Same kernel, initrd and command line as the QEMU backend, TCG with -cpu max.
    assert dom.get("type") == "qemu"
    assert dom.findtext("os/cmdline") == argv[argv.index("-append") + 1]
    assert dom.findtext("os/kernel") == str(img.kernel)
    assert dom.findtext("os/initrd") == str(img.initrd)
    assert dom.find("os/type").get("machine") == "q35"  # type: ignore[union-attr]
    assert dom.find("cpu").get("mode") == "maximum"  # type: ignore[union-attr]
    assert (dom.findtext("memory"), dom.findtext("vcpu")) == ("768", "1")
    # No NIC, no balloon, no USB; the console on a pty (read through libvirt, so no path
    # of ours in the domain); the agent channel.
    assert dom.find("devices/interface") is None
    assert dom.find("devices/memballoon").get("model") == "none"  # type: ignore[union-attr]
    assert dom.find("devices/serial").get("type") == "pty"  # type: ignore[union-attr]
    assert dom.find("devices/serial/source") is None
    names = [t.get("name") for t in dom.iterfind("devices/channel/target")]
    assert names == ["org.qemu.guest_agent.0"]
    assert {e.text for e in dom.iterfind("on_reboot")} == {"destroy"}


def test_disks_by_serial_with_their_options(img: Image, tmp_path: Path) -> None:
    dom = _parse(domain_xml(img, _spec(tmp_path), "kvm", "crashlab-t"))
    assert dom.get("type") == "kvm"
    assert dom.find("cpu").get("mode") == "host-passthrough"  # type: ignore[union-attr]
    disks = {d.findtext("serial"): d for d in dom.iterfind("devices/disk")}
    assert list(disks) == ["crashlab-root", "plain", "cow", "ro", "hdd"]
    root = disks["crashlab-root"]
    # The root disk is an overlay of the guest's own over the cached image, opened
    # read-only under it (guests share the image), and comes first (vda).
    assert root.find("source").get("file") == str(  # type: ignore[union-attr]
        overlays.overlay_dir() / "crashlab-t-crashlab-root.qcow2"
    )
    assert root.find("driver").get("type") == "qcow2"  # type: ignore[union-attr]
    assert root.find("backingStore/source").get("file") == str(img.rootfs)  # type: ignore[union-attr]
    assert root.find("backingStore/format").get("type") == "qcow2"  # type: ignore[union-attr]
    assert root.find("transient") is None and root.find("readonly") is None
    assert root.find("target").get("dev") == "vda"  # type: ignore[union-attr]
    # A raw disk is written through (a kill leaves what the guest wrote), not an overlay.
    plain = disks["plain"]
    assert plain.find("driver").get("cache") == "none"  # type: ignore[union-attr]
    assert plain.find("transient") is None and plain.find("readonly") is None
    assert disks["cow"].find("driver").get("type") == "qcow2"  # type: ignore[union-attr]
    assert disks["cow"].find("transient") is not None
    assert disks["ro"].find("readonly") is not None
    assert disks["hdd"].findtext("iotune/total_iops_sec") == "120"
    assert disks["plain"].find("iotune") is None


def test_many_disks_go_behind_bridges_with_unique_addresses(img: Image, tmp_path: Path) -> None:
    dom = _parse(domain_xml(img, _spec(tmp_path, n=60), "tcg", "crashlab-t"))
    addrs = [(a.get("bus"), a.get("slot")) for a in dom.iterfind("devices/*/address")]
    assert len(addrs) == len(set(addrs))
    bridges = dom.findall("devices/controller[@model='pcie-to-pci-bridge']")
    assert [b.get("index") for b in bridges] == ["2", "4"]  # 40 disks past the root bus
    targets = [t.get("dev") for t in dom.iterfind("devices/disk/target")]
    assert len(set(targets)) == 61


def test_spare_root_ports_for_hotplug_leave_disks_where_they_were(
    img: Image, tmp_path: Path
) -> None:
    """Both backends add the spare root ports asked for after everything else: a boot-time
    disk's address does not depend on them; none are added unless asked for."""
    for n, bridge_ports in ((3, 0), (60, 2)):
        spec = _spec(tmp_path, n=n)
        dom = _parse(domain_xml(img, spec, "tcg", "crashlab-t"))
        assert len(dom.findall("devices/controller[@model='pcie-root-port']")) == bridge_ports
        assert not any("pcie-root-port" in a for a in qemu_argv(img, spec, "tcg", tmp_path))
    spec = _spec(tmp_path, n=60, hotplug_ports=HOTPLUG_PORTS)
    dom = _parse(domain_xml(img, spec, "tcg", "crashlab-t"))
    ports = dom.findall("devices/controller[@model='pcie-root-port']")
    # Two bridges' root ports (indexes 1, 3), then the spare ones, which libvirt places.
    spare = [p for p in ports if p.find("address") is None]
    assert [p.get("index") for p in spare] == [str(5 + n) for n in range(HOTPLUG_PORTS)]
    argv = qemu_argv(img, spec, "tcg", tmp_path)
    devices = [argv[i + 1] for i, a in enumerate(argv) if a == "-device"]
    assert devices[-HOTPLUG_PORTS:] == [
        f"pcie-root-port,id=hp{n},bus=pcie.0,chassis={n + 1}" for n in range(HOTPLUG_PORTS)
    ]
    assert not any("pcie-root-port" in d for d in devices[:-HOTPLUG_PORTS])


def test_target_names() -> None:
    assert [_target(i) for i in (0, 1, 25, 26, 27, 701)] == [
        "vda",
        "vdb",
        "vdz",
        "vdaa",
        "vdab",
        "vdzz",
    ]


def test_blklogwrites_disk_says_to_use_qemu(img: Image, tmp_path: Path) -> None:
    spec = GuestSpec(disks=(Disk(tmp_path / "a.raw", "dut", blklogwrites=tmp_path / "log"),))
    with pytest.raises(HarnessError) as exc:
        domain_xml(img, spec, "tcg", "crashlab-t")
    assert "--backend qemu" in (exc.value.hint or "")


def test_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "_selected", None)
    monkeypatch.delenv("CRASHLAB_BACKEND", raising=False)
    assert isinstance(backend.backend(), QemuBackend)
    monkeypatch.setenv("CRASHLAB_BACKEND", "libvirt")
    monkeypatch.setenv("CRASHLAB_LIBVIRT_URI", "qemu+ssh://lab2/system")
    chosen = backend.backend()
    assert isinstance(chosen, LibvirtBackend) and chosen.uri == "qemu+ssh://lab2/system"
    backend.select("qemu")
    assert isinstance(backend.backend(), QemuBackend)
    monkeypatch.setattr(backend, "_selected", None)
    monkeypatch.setenv("CRASHLAB_BACKEND", "xen")
    with pytest.raises(InputError, match="CRASHLAB_BACKEND"):
        backend.backend()


def test_backend_is_a_scenario_key_stored_with_the_run() -> None:
    sc = scenario.load("ext4-ordered-fsync")
    assert sc.backend is Backend.QEMU and sc.resolved()["backend"] == "qemu"
    sc = scenario.load("ext4-ordered-fsync", ("backend=libvirt", "libvirt_uri=qemu:///session"))
    assert sc.resolved()["backend"] == "libvirt"
    assert sc.resolved()["libvirt_uri"] == "qemu:///session"
    with pytest.raises(InputError, match="not one of qemu, libvirt"):
        scenario.load("ext4-ordered-fsync", ("backend=xen",))
    with pytest.raises(InputError, match="expected a libvirt URI"):
        scenario.load("ext4-ordered-fsync", ("libvirt_uri=lab2",))


def _scenario(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os
    import sys

    exe = Path(sys.executable).with_name("scenario")
    return subprocess.run(
        [str(exe), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def test_unreachable_uri_is_a_harness_error_without_traceback() -> None:
    """A port nobody listens on, on loopback: refused at once; exit 3, a hint, no run."""
    r = _scenario(
        "run", "ext4-ordered-fsync", "--backend", "libvirt", "--libvirt-uri",
        "qemu+tcp://127.0.0.1:9/system", "--db", "/nonexistent/never.sqlite",
    )  # fmt: skip
    assert r.returncode == 3, shlex.join(r.args) + "\n" + r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert "does not answer" in out and "virsh -c" in out and "Traceback" not in out


def test_unknown_backend_is_bad_input() -> None:
    r = _scenario("run", "ext4-ordered-fsync", env={"CRASHLAB_BACKEND": "xen"})
    assert r.returncode == 2 and "CRASHLAB_BACKEND='xen'" in r.stdout + r.stderr
    r = _scenario("vm", "run", "--backend", "xen", "--", "true")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_local_system_uri_is_the_only_one_started_here() -> None:
    assert libvirtd.is_local_system("qemu:///system")
    assert not libvirtd.is_local_system("qemu:///session")
    assert not libvirtd.is_local_system("qemu+ssh://lab2/system")


def test_a_media_caps_only_its_own_disk_in_qemus_command_line(img: Image, tmp_path: Path) -> None:
    argv = qemu_argv(img, _spec(tmp_path), "tcg", tmp_path)
    drives = {a.split("id=")[1].split(",")[0]: a for a in argv if a.startswith("if=none")}
    capped = [d for d, a in drives.items() if "throttling.iops-total=120" in a]
    assert capped == ["d3"] and "throttling.bps-total=160000000" in drives["d3"]
