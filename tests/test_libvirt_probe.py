"""The libvirt host's KVM is proven by a probe boot there (harness/vm/libvirt_accel.py),
booted for real through qemu:///system: this lab's hosts are nested, their libvirt lists
KVM and no KVM guest runs, so the probe must come out TCG, with the reason, and agree
with the local probe boot (harness/vm/accel.py) on the same host. About 15 s here."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from harness.image import build as image
from harness.vm import accel, libvirt_accel, libvirtd
from tests.test_cli import scenario
from tests.test_vm import crashlab_domains

# exclusive: asserts on every libvirt domain of the host (make test runs it alone).
pytestmark = [pytest.mark.vm, pytest.mark.exclusive]

URI = libvirtd.DEFAULT_URI


def _probe_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("crashlab-probe-*"))


def test_the_libvirt_hosts_kvm_is_decided_by_a_boot_there(
    guest_image: image.Image, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRASHLAB_ACCEL", raising=False)
    local = accel.probe(guest_image)
    before = _probe_dirs()
    conn = libvirtd.connect(URI)
    try:
        got = libvirt_accel.probe(conn, URI, guest_image, refresh=True)
        again = libvirt_accel.probe(conn, URI, guest_image)
    finally:
        conn.close()
    assert (got.accelerator, got.cached) == (local.accelerator, False)
    if got.accelerator == "tcg":
        # Here: QEMU aborts starting the lab's KVM domain (MSR 0x10a); elsewhere a hang.
        assert (
            "could not start a KVM test domain" in got.reason
            or "hung: no 'crashlab-probe-ok' on its console in 30 s" in got.reason
        ), got.reason
    assert again == type(got)(got.accelerator, got.kvm_works, got.reason, cached=True)
    assert crashlab_domains() == []
    assert _probe_dirs() == before


def test_a_kvm_boot_that_hangs_is_given_up_at_its_timeout(
    guest_image: image.Image, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With QEMU's default CPU this host's KVM domain starts, and its kernel hangs."""
    monkeypatch.delenv("CRASHLAB_ACCEL", raising=False)
    if accel.probe(guest_image).kvm_works:
        pytest.skip("this host's KVM works: there is no hang to see")
    conn = libvirtd.connect(URI)
    try:
        seen = libvirt_accel.boot(
            conn, URI, str(guest_image.kernel), str(accel.probe_initramfs()), cpu=None, timeout=8
        )
    finally:
        conn.close()
    got = libvirt_accel.judge(seen, URI, 8)
    assert (got.accelerator, got.kvm_works) == ("tcg", False)
    assert "hung: no 'crashlab-probe-ok' on its console in 8 s" in got.reason, got.reason
    assert "SeaBIOS" in seen.console  # the firmware ran; the kernel never spoke
    assert 8 <= seen.seconds < 10
    assert crashlab_domains() == []


def test_doctor_shows_the_libvirt_hosts_accelerator(guest_image: image.Image) -> None:
    r = scenario("doctor", "--libvirt-uri", URI, "--json")
    assert r.returncode == 0, r.stderr
    checks = {c["check"]: c for c in json.loads(r.stdout)["checks"]}
    there = checks[f"accelerator on {URI}"]
    assert there["status"] == checks["accelerator"]["status"]
    assert there["detail"].startswith(f"libvirt on {URI} ") or there["detail"].startswith(
        f"a test boot under KVM through libvirt on {URI} "
    ), there
