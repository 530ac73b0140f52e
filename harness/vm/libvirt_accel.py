"""KVM or TCG for a libvirt guest, decided where the guest runs: on the libvirt host.

The libvirt host says what its QEMU can do in its domain capabilities
(``virConnectGetDomainCapabilities``, what ``virsh domcapabilities --virttype kvm``
prints): libvirt refuses the question when the host has no KVM (no ``/dev/kvm``, a QEMU
without it), and the answer must offer KVM with the host's CPU passed through, as the
domain asks for (``libvirt.domain_xml``). Otherwise the guest runs under TCG (domain
type ``qemu``).

Listed is not proven: on a nested host ``/dev/kvm`` exists, libvirt lists KVM, and a KVM
boot still hangs (``harness.vm.accel``). When the libvirt host is this one
(``qemu:///system``, or a URI whose host answers with our hostname, e.g.
``qemu+ssh://localhost/system``) the local probe boot (``accel.probe``, cached) has the
last word; another host's listing is taken as it stands (``CRASHLAB_ACCEL=tcg``
overrides it).
"""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from typing import Any

from harness.image.build import Image
from harness.vm import accel, libvirtd
from harness.vm.accel import ProbeResult


def kvm_refusal(caps_xml: str) -> str | None:
    """Why domain capabilities ``caps_xml`` do not offer the lab's KVM guest; None if
    they do."""
    caps = ET.fromstring(caps_xml)
    domain = caps.findtext("domain")
    if domain != "kvm":
        return f"its domain capabilities are for domain type {domain!r}, not 'kvm'"
    passthrough = caps.find("cpu/mode[@name='host-passthrough']")
    if passthrough is None or passthrough.get("supported") != "yes":
        return "KVM without the host-passthrough CPU mode"
    return None


def probe(conn: Any, uri: str, image: Image) -> ProbeResult:
    """The accelerator for guests of ``conn`` (libvirt URI ``uri``); ``image`` is the
    local image, whose kernel the local probe boots."""
    if (forced := accel.forced()) is not None:
        return forced
    libvirt = libvirtd.module()
    try:
        caps = conn.getDomainCapabilities(None, "x86_64", "q35", "kvm", 0)
    except libvirt.libvirtError as e:
        return ProbeResult("tcg", False, f"libvirt on {uri} offers no KVM: {e}")
    if (why := kvm_refusal(caps)) is not None:
        return ProbeResult("tcg", False, f"libvirt on {uri}: {why}")
    if libvirtd.is_local_system(uri) or conn.getHostname() == socket.gethostname():
        return accel.probe(image)
    return ProbeResult("kvm", True, f"libvirt on {uri} lists KVM (no test boot there)")


def emulator(conn: Any, uri: str) -> str:
    """The libvirt host's QEMU, as a run records it."""
    v = conn.getVersion()
    return f"QEMU {v // 1_000_000}.{v // 1000 % 1000}.{v % 1000} (libvirt {uri})"
