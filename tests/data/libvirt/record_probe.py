"""Records the probe-boot fixtures of tests/test_libvirt_accel.py from real boots on
qemu:///system (see README.md here). Run as root, under the guest lock:

    flock /tmp/crashlab-guest.lock env PYTHONPATH=$PWD \
        .venv/bin/python tests/data/libvirt/record_probe.py
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from harness.image.build import require_image
from harness.vm import accel, libvirt_accel, libvirtd

HERE = Path(__file__).parent
URI = libvirtd.DEFAULT_URI


def main() -> None:
    kernel, initrd = str(require_image().kernel), str(accel.probe_initramfs())
    conn = libvirtd.connect(URI)
    boots = {
        # The lab's probe as it is: KVM with the host's CPU.
        "kvm-passthrough": libvirt_accel.boot(conn, URI, kernel, initrd, timeout=15),
        # KVM with QEMU's default CPU: starts, and hangs here.
        "kvm-default-cpu": libvirt_accel.boot(conn, URI, kernel, initrd, cpu=None, timeout=15),
    }
    # A working boot's console: the same machine under TCG (no working KVM here).
    as_kvm = libvirt_accel.probe_xml
    libvirt_accel.probe_xml = lambda *a: as_kvm(*a).replace('type="kvm"', 'type="qemu"')  # type: ignore[assignment]
    boots["tcg"] = libvirt_accel.boot(conn, URI, kernel, initrd, cpu="maximum", timeout=60)
    # What QEMU says of a kernel or an initramfs the host does not have (under TCG: this
    # host's KVM aborts before QEMU opens them).
    missing = "/nonexistent/crashlab-probe"
    boots["missing-kernel"] = libvirt_accel.boot(conn, URI, missing, initrd, cpu="maximum")
    boots["missing-initrd"] = libvirt_accel.boot(conn, URI, kernel, missing, cpu="maximum")
    conn.close()
    for name, b in boots.items():
        (HERE / f"probe-{name}.json").write_text(json.dumps(asdict(b), indent=2) + "\n")
        print(name, libvirt_accel.judge(b, URI, 15))


if __name__ == "__main__":
    main()
