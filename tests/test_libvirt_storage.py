"""The guest's files in a libvirt storage pool (harness/vm/libvirt_storage.py), against
the real libvirtd with a throw-away directory pool; no guest boots here (the guest over
qemu+ssh:// with a pool is in test_libvirt_ssh.py). Bad pool names through the CLI."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.image.build import Image
from harness.vm import leftovers, libvirt_storage, libvirtd
from harness.vm.backend import Disk


@contextlib.contextmanager
def dir_pool(conn: Any, *, active: bool = True) -> Iterator[tuple[str, Path]]:
    """A transient directory pool under /var/tmp (not the lab's work directory nor its
    image cache): its name and directory; gone afterwards, with its volumes. Inactive:
    defined, never started, then undefined."""
    d = Path(tempfile.mkdtemp(prefix="crashlab-pool-", dir="/var/tmp"))
    name = f"crashlab-test-{uuid.uuid4().hex[:8]}"
    xml = f"<pool type='dir'><name>{name}</name><target><path>{d}</path></target></pool>"
    pool = conn.storagePoolCreateXML(xml, 0) if active else conn.storagePoolDefineXML(xml, 0)
    try:
        yield name, d
    finally:
        if active:
            for vol in pool.listAllVolumes():
                vol.delete(0)
            pool.destroy()
        else:
            pool.undefine()
        shutil.rmtree(d, ignore_errors=True)



def volumes(conn: Any, name: str) -> set[str]:
    """The pool's volumes as its directory holds them now: libvirt refreshes its list
    after an upload, so an upload while a guest runs lists that guest's transient root
    overlay, which stays listed after libvirt deleted the file, until the next refresh."""
    pool = conn.storagePoolLookupByName(name)
    pool.refresh(0)
    return {v.name() for v in pool.listAllVolumes()}


@pytest.fixture
def conn() -> Iterator[Any]:
    c = libvirtd.connect()
    yield c
    c.close()


def _sparse(path: Path, size: int, writes: dict[int, bytes]) -> None:
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, data in writes.items():
            f.seek(offset)
            f.write(data)


def test_sections_of_a_sparse_file(tmp_path: Path) -> None:
    """What the upload sends: data where the file has some, holes elsewhere, and the
    file's offset left where the section starts (the handlers read from there)."""
    p = tmp_path / "s.raw"
    _sparse(p, 8 << 20, {1 << 20: b"a", 6 << 20: b"b" * 5000})
    fd = os.open(p, os.O_RDONLY)
    try:
        seen = []
        while True:
            here = os.lseek(fd, 0, os.SEEK_CUR)
            in_data, n = libvirt_storage._section(fd, 8 << 20)
            assert os.lseek(fd, 0, os.SEEK_CUR) == here
            if n == 0:
                break
            seen.append((in_data, here, n))
            os.lseek(fd, n, os.SEEK_CUR)
    finally:
        os.close(fd)
    assert [s[0] for s in seen] == [False, True, False, True, False]
    assert sum(s[2] for s in seen) == 8 << 20
    assert seen[1][1] <= 1 << 20 < seen[1][1] + seen[1][2]


def test_image_uploaded_once_by_content_disks_round_trip(
    conn: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="crashlab.libvirt")
    files = {n: tmp_path / n for n in ("rootfs.qcow2", "vmlinuz", "initrd.img")}
    for i, p in enumerate(files.values()):
        p.write_bytes(bytes([i]) * 10000)
    img = Image(tmp_path, files["rootfs.qcow2"], files["vmlinuz"], files["initrd.img"], {})
    disk = tmp_path / "disk.raw"
    _sparse(disk, 64 << 20, {1 << 20: b"host"})
    ro = tmp_path / "ro.raw"
    _sparse(ro, 1 << 20, {0: b"readonly"})
    with dir_pool(conn) as (name, d):
        pool = libvirt_storage.open_pool(conn, "qemu:///system", name)
        staged = libvirt_storage.stage_image(pool, img)
        for there, here in zip(
            (staged.rootfs, staged.kernel, staged.initrd), files.values(), strict=True
        ):
            assert there.parent == d and there.read_bytes() == here.read_bytes()
        images = volumes(conn, name)
        assert len(images) == 6  # three files and their completion markers
        # The next run finds them by content: nothing is uploaded again.
        caplog.clear()
        assert libvirt_storage.stage_image(pool, img) == staged
        assert not [r for r in caplog.records if r.message.startswith("uploaded")]

        run = libvirt_storage.RunVolumes(pool, "crashlab-unit")
        placed = run.put(Disk(disk, "dut"))
        placed_ro = run.put(Disk(ro, "ro", readonly=True))
        assert placed.path.parent == d and placed.path.read_bytes() == disk.read_bytes()
        # Sparse: the 64 MiB disk's volume holds about what the file holds.
        assert os.stat(placed.path).st_blocks * 512 < 1 << 20
        with open(placed.path, "r+b") as f:  # what a guest would write
            f.seek(3 << 20)
            f.write(b"guest")
        with open(placed_ro.path, "r+b") as f:
            f.write(b"XXXXXXXX")
        run.close(download=True)
        data = disk.read_bytes()
        assert len(data) == 64 << 20 and data[1 << 20 : (1 << 20) + 4] == b"host"
        assert data[3 << 20 : (3 << 20) + 5] == b"guest"
        assert os.stat(disk).st_blocks * 512 < 1 << 20
        assert ro.read_bytes()[:8] == b"readonly"  # a read-only disk is never copied back
        assert volumes(conn, name) == images


def _scenario(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("scenario")
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}
    )


def test_missing_or_inactive_pool_is_a_harness_error(conn: Any) -> None:
    """Named, with the virsh command that fixes it; exit 3 before any run is recorded."""
    run = ["run", "ext4-ordered-fsync", "--backend", "libvirt", "--db", "/nonexistent/x.sqlite"]
    r = _scenario(*run, "--libvirt-pool", "crashlab-no-such-pool")
    out = r.stdout + r.stderr
    assert r.returncode == 3, shlex.join(r.args) + "\n" + out
    assert "'crashlab-no-such-pool' does not exist" in out and "pool-define-as" in out
    assert "Traceback" not in out
    with dir_pool(conn, active=False) as (name, _):
        r = _scenario("vm", "run", "--backend", "libvirt", "--libvirt-pool", name, "--", "true")
        out = r.stdout + r.stderr
        assert r.returncode == 3, shlex.join(r.args) + "\n" + out
        assert f"{name!r} on qemu:///system is not active" in out and "pool-start" in out
        assert "Traceback" not in out


def _qemu_img_info(path: Path) -> dict[str, Any]:
    r = subprocess.run(
        ["qemu-img", "info", "-U", "--output=json", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(r.stdout))


def test_each_guest_gets_a_root_overlay_volume_over_the_shared_image(
    conn: Any, tmp_path: Path
) -> None:
    """Two guests on one staged image: a qcow2 volume each, backed by the image volume
    with its size, listed by `lab clean` while their domains are gone, deleted on close."""
    base = tmp_path / "rootfs.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(base), "96M"], check=True)
    for n in ("vmlinuz", "initrd.img"):
        (tmp_path / n).write_bytes(b"k")
    img = Image(tmp_path, base, tmp_path / "vmlinuz", tmp_path / "initrd.img", {})
    with dir_pool(conn) as (name, d):
        pool = libvirt_storage.open_pool(conn, "qemu:///system", name)
        staged = libvirt_storage.stage_image(pool, img)
        images = volumes(conn, name)
        runs = [libvirt_storage.RunVolumes(pool, f"crashlab-{c * 12}") for c in "ab"]
        paths = [r.overlay(staged.rootfs) for r in runs]
        assert len(set(paths)) == 2
        for p in paths:
            info = _qemu_img_info(p)
            assert p.parent == d and info["format"] == "qcow2"
            assert info["full-backing-filename"] == str(staged.rootfs)
            assert info["backing-filename-format"] == "qcow2"
            assert info["virtual-size"] == 96 << 20
        gone = {f.what for f in leftovers.volumes(pool, conn)}
        assert gone == {f"crashlab-{c * 12}-crashlab-root" for c in "ab"}
        for r in runs:
            r.close(download=True)
        assert volumes(conn, name) == images and not any(p.exists() for p in paths)
