"""Two libvirt guests booted at once from the one cached image (each on a root overlay of
its own, harness/vm/overlays.py): both run, neither sees the other's writes, the image
is not written, and no domain nor overlay is left. Before the overlays the second domain
failed to start ("Failed to get write lock" on the image)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from harness.image import build as image
from harness.vm import backend, overlays
from harness.vm.backend import GuestSpec, start_guest
from tests.test_vm import crashlab_domains

# exclusive: asserts on every libvirt domain of the host (make test runs it alone).
pytestmark = [pytest.mark.vm, pytest.mark.exclusive]


def test_two_libvirt_guests_on_one_image_at_once(guest_image: image.Image) -> None:
    backend.select("libvirt")
    both_up = threading.Barrier(2, timeout=600)
    seen: dict[str, str] = {}
    during: dict[str, list[Path]] = {}
    errors: list[BaseException] = []
    before = guest_image.rootfs.stat().st_mtime_ns

    def guest(name: str) -> None:
        try:
            with start_guest(GuestSpec(memory_mb=512, cpus=1)) as g:
                g.write_file("/root/whoami", name.encode())
                both_up.wait()  # both domains run on the image here
                during[name] = sorted(overlays.overlay_dir().glob("crashlab-*"))
                seen[name] = g.run(["cat", "/root/whoami"], check=True).out
        except BaseException as e:
            both_up.abort()
            errors.append(e)

    try:
        threads = [threading.Thread(target=guest, args=(n,)) for n in ("one", "two")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        backend._selected = None
    assert not errors, errors
    assert seen == {"one": "one", "two": "two"}  # each its own root, from one image
    assert len(during["one"]) >= 2 and during["one"] == during["two"]
    assert guest_image.rootfs.stat().st_mtime_ns == before
    assert crashlab_domains() == []
    assert not set(during["one"]) & set(overlays.overlay_dir().glob("*"))
