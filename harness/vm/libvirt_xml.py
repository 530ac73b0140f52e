"""The bare libvirt machine, shared by the lab's guest (``libvirt.domain_xml``) and the
KVM probe boot (``libvirt_accel``): what ``accel.machine_argv`` is to the QEMU backend.

q35, direct kernel boot, no default devices but the serial console on a pty (read
through libvirt, ``libvirt_console``: a file would be on the libvirt host), every stop
ends the domain, and QEMU runs as root without relabelling (the cached image and the
disks are root's files, shared by other guests).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET


def el(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    e = ET.SubElement(parent, tag, attrs)
    if text is not None:
        e.text = text
    return e


def pci(parent: ET.Element, bus: int, slot: int) -> None:
    el(parent, "address", type="pci", domain="0x0000", bus=f"{bus:#04x}", slot=f"{slot:#04x}")


def cpu_mode(accelerator: str) -> str:
    """-cpu host under KVM, -cpu max under TCG, as ``accel.machine_argv`` does."""
    return "host-passthrough" if accelerator == "kvm" else "maximum"


def machine(
    name: str,
    accelerator: str,
    *,
    memory_mb: int,
    cpus: int,
    kernel: str,
    initrd: str,
    cmdline: str,
    cpu: str | None,
) -> tuple[ET.Element, ET.Element]:
    """The domain and its ``<devices>``, for the caller to add its own to. ``cpu`` is a
    libvirt CPU mode (``cpu_mode``), or None for QEMU's default model."""
    dom = ET.Element("domain", type="kvm" if accelerator == "kvm" else "qemu")
    el(dom, "name", name)
    el(dom, "memory", str(memory_mb), unit="MiB")
    el(dom, "vcpu", str(cpus))
    os_ = el(dom, "os")
    el(os_, "type", "hvm", arch="x86_64", machine="q35")
    el(os_, "kernel", kernel)
    el(os_, "initrd", initrd)
    el(os_, "cmdline", cmdline)
    features = el(dom, "features")
    el(features, "acpi")
    el(features, "apic")
    if cpu is not None:
        el(dom, "cpu", mode=cpu)
    # -no-reboot: panic=-1 reboots at once, and a reboot ends the domain.
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        el(dom, event, "destroy")
    dev = el(dom, "devices")
    el(dev, "controller", type="usb", model="none")
    serial = el(dev, "serial", type="pty")
    el(serial, "target", port="0")
    seclabel = el(dom, "seclabel", type="static", model="dac", relabel="no")
    el(seclabel, "label", "+0:+0")
    return dom, dev


def text(dom: ET.Element) -> str:
    ET.indent(dom)
    return ET.tostring(dom, encoding="unicode")
