"""The accelerator of a libvirt guest, chosen on the libvirt host
(harness/vm/libvirt_accel.py): its domain capabilities and the verdict on its probe boot,
from recorded answers and consoles (tests/data/libvirt/README.md), the probe's cache, and
real libvirt connections; no guest boots here (the boot itself: test_libvirt_probe.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.image.build import Image
from harness.vm import accel, libvirt_accel, libvirtd
from harness.vm.accel import ProbeResult
from harness.vm.libvirt_accel import Boot

CAPS = Path(__file__).parent / "data" / "libvirt"
URI = "qemu:///system"


def _recorded(name: str) -> Boot:
    return Boot(**json.loads((CAPS / f"probe-{name}.json").read_text()))


def test_kvm_is_offered_only_with_kvm_and_the_hosts_cpu() -> None:
    assert libvirt_accel.kvm_refusal((CAPS / "domcaps-kvm-q35.xml").read_text()) is None
    why = libvirt_accel.kvm_refusal((CAPS / "domcaps-qemu-q35.xml").read_text())
    assert why == "its domain capabilities are for domain type 'qemu', not 'kvm'"
    # KVM listed, but without the CPU mode the domain asks for under KVM.
    kvm = (CAPS / "domcaps-kvm-q35.xml").read_text()
    no_passthrough = kvm.replace(
        "<mode name='host-passthrough' supported='yes'>",
        "<mode name='host-passthrough' supported='no'>",
    )
    assert no_passthrough != kvm
    assert libvirt_accel.kvm_refusal(no_passthrough) == "KVM without the host-passthrough CPU mode"


def test_a_host_that_cannot_say_runs_its_guests_under_tcg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libvirt's test driver answers no domain-capabilities question: TCG, and why."""
    monkeypatch.delenv("CRASHLAB_ACCEL", raising=False)
    img = Image(tmp_path, tmp_path / "r", tmp_path / "k", tmp_path / "i", {})
    conn = libvirtd.connect("test:///default")
    try:
        got = libvirt_accel.probe(conn, "test:///default", img)
        assert (got.accelerator, got.kvm_works) == ("tcg", False)
        assert got.reason.startswith("libvirt on test:///default offers no KVM: ")
        monkeypatch.setenv("CRASHLAB_ACCEL", "kvm")  # the operator's word wins
        assert libvirt_accel.probe(conn, "test:///default", img).accelerator == "kvm"
    finally:
        conn.close()


def test_the_libvirt_hosts_qemu_is_what_a_run_records() -> None:
    conn = libvirtd.connect()
    try:
        said = libvirt_accel.emulator(conn, "qemu:///system")
    finally:
        conn.close()
    # This host's libvirtd runs this host's QEMU: the same version as its --version.
    version = accel.qemu_version().split("version ")[1].split()[0]
    assert said == f"QEMU {version} (libvirt qemu:///system)"


def test_kvm_is_chosen_only_when_the_probes_initramfs_spoke() -> None:
    # The lab's domain under this host's KVM: QEMU aborts before the guest runs.
    refused = libvirt_accel.judge(_recorded("kvm-passthrough"), URI, 15)
    assert (refused.accelerator, refused.kvm_works) == ("tcg", False)
    assert refused.reason.startswith(
        "libvirt on qemu:///system could not start a KVM test domain: internal error: "
    )
    # QEMU's two lines, on one line of the reason.
    assert "failed to set MSR 0x10a to 0x69 / qemu-system-x86_64: " in refused.reason
    # QEMU's default CPU under this host's KVM: firmware and the kernel's setup, then nothing.
    hung = libvirt_accel.judge(_recorded("kvm-default-cpu"), URI, 15)
    assert (hung.accelerator, hung.kvm_works) == ("tcg", False)
    assert hung.reason == (
        "a test boot under KVM through libvirt on qemu:///system hung: no 'crashlab-probe-ok' "
        "on its console in 15 s (last console line 'Probing EDD (edd=off to disable)... ok')"
    )
    # A boot whose initramfs spoke (recorded under TCG: there is no working KVM here).
    works = libvirt_accel.judge(_recorded("tcg"), URI, 15)
    assert works == ProbeResult(
        "kvm", True, "a test boot under KVM through libvirt on qemu:///system took 5.3 s"
    )


def test_a_probe_domain_that_stops_before_speaking_means_tcg() -> None:
    stopped = Boot(_recorded("kvm-default-cpu").console, 3.0, ended=True)
    got = libvirt_accel.judge(stopped, URI, 15)
    assert (got.accelerator, got.reason) == (
        "tcg",
        "a test boot under KVM through libvirt on qemu:///system stopped before its initramfs "
        "spoke (last console line 'Probing EDD (edd=off to disable)... ok')",
    )
    for nothing in ("", "\x1bc\x1b[?7l\x1b[2J\n"):  # SeaBIOS's screen reset, no text
        silent = libvirt_accel.judge(Boot(nothing, 15.0), URI, 15)
        assert silent.accelerator == "tcg"
        assert silent.reason.endswith("in 15 s (its console stayed empty)")


def test_the_probe_domain_is_the_guests_machine_and_libvirt_accepts_it(tmp_path: Path) -> None:
    """libvirt's schema and libvirtd take it (defined, never started, undefined)."""
    name = f"crashlab-unit-{tmp_path.name[-12:]}"
    xml = libvirt_accel.probe_xml(name, "/k", "/i", "host-passthrough")
    out = tmp_path / "probe.xml"
    out.write_text(xml)
    r = subprocess.run(["virt-xml-validate", str(out), "domain"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    conn = libvirtd.connect()
    try:
        dom = conn.defineXML(xml)
        try:
            placed = dom.XMLDesc()
        finally:
            dom.undefine()
    finally:
        conn.close()
    assert "<domain type='kvm'" in placed
    assert "<bios useserial='yes'/>" in placed
    assert "<cpu mode='host-passthrough'" in placed
    assert "<disk" not in placed and "<interface" not in placed


def test_a_probe_answer_is_kept_per_key(tmp_path: Path) -> None:
    cache = tmp_path / "accel.json"
    boots: list[str] = []

    def probe_now() -> ProbeResult:
        boots.append("boot")
        return ProbeResult("tcg", False, f"hung #{len(boots)}")

    first = accel.cached(cache, "uri|host|kernel-a", probe_now)
    assert first == ProbeResult("tcg", False, "hung #1")
    again = accel.cached(cache, "uri|host|kernel-a", probe_now)
    assert again == ProbeResult("tcg", False, "hung #1", cached=True)
    # Another kernel (or host, or QEMU) is probed anew; so is a refresh.
    assert accel.cached(cache, "uri|host|kernel-b", probe_now).reason == "hung #2"
    assert accel.cached(cache, "uri|host|kernel-b", probe_now, refresh=True).reason == "hung #3"
    cache.write_text("{not json")
    assert accel.cached(cache, "uri|host|kernel-b", probe_now).reason == "hung #4"
    assert len(boots) == 4


def test_a_probe_file_the_host_cannot_open_is_named_not_taken_for_no_kvm() -> None:
    """QEMU's refusals of a missing kernel and initramfs, as recorded; the probe raises
    for these (not cached), since the guest would fail the same way."""
    kernel, initrd = "/nonexistent/crashlab-probe", "/var/lib/crashlab/probe.cpio"
    assert libvirt_accel.unopened(_recorded("missing-kernel"), (kernel, initrd)) == kernel
    assert libvirt_accel.unopened(_recorded("missing-initrd"), (initrd, kernel)) == kernel
    # A path that only begins like the one named is not it.
    assert libvirt_accel.unopened(_recorded("missing-kernel"), ("/nonexistent/crash",)) is None
    # QEMU's abort under this host's KVM names no file: that one is an answer (TCG).
    assert libvirt_accel.unopened(_recorded("kvm-passthrough"), (kernel, initrd)) is None
