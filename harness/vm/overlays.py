"""A libvirt guest's root disk: a qcow2 overlay of its own over the cached image.

libvirt's ``<transient/>`` disk opened the image itself read-write, so a second domain
on the same cached image failed ("Failed to get write lock"). What the qemu backend's
``snapshot=on`` does is what the lab does here by hand: every guest writes to a qcow2
file of its own whose backing file is the image; QEMU opens a backing file read-only,
with a shared lock, so any number of guests boot from one image at once.

The overlay is named by its domain (``crashlab-<12 hex>-root``, the label of a guest's
pool volumes), so that ``scenario lab clean`` can tell a killed harness's overlay from a
running guest's (``harness.vm.leftovers``):

- without a storage pool, a file in ``overlay_dir()``: in the lab's cache, beside the
  image cache that the libvirt host already opens at our paths; made with qemu-img here;
- with one, a volume of the pool, made by libvirt on its host
  (``libvirt_storage.RunVolumes.overlay``).

Either is deleted when the guest stops; a SIGKILLed harness leaves it for ``lab clean``.
"""

from __future__ import annotations

from pathlib import Path

from harness import paths, proc

ROOT_SERIAL = "crashlab-root"


def overlay_dir() -> Path:
    return paths.cache_dir() / "overlays"


def name(domain: str) -> str:
    """The overlay's name: the domain's, as a guest's pool volumes are named."""
    return f"{domain}-{ROOT_SERIAL}.qcow2"


def create(domain: str, base: Path) -> Path:
    """A new, empty qcow2 overlay for ``domain`` over the qcow2 image ``base``.

    :raise ToolMissing: qemu-img is not installed.
    :raise CommandFailed: qemu-img could not read ``base`` or write the overlay.
    """
    out = overlay_dir() / name(domain)
    out.parent.mkdir(parents=True, exist_ok=True)
    # No size: the overlay takes the image's. qemu-img reads the image read-only, which
    # the guests running on it allow.
    proc.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, out])
    return out
