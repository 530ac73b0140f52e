"""The accelerator of a libvirt guest, chosen from the libvirt host's domain capabilities
(harness/vm/libvirt_accel.py): recorded answers (tests/data/libvirt/README.md) and a real
libvirt connection that cannot answer; no guest boots here."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.image.build import Image
from harness.vm import accel, libvirt_accel, libvirtd

CAPS = Path(__file__).parent / "data" / "libvirt"


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
