"""The guest's files in a libvirt storage pool, for a libvirt host that does not share ours.

Without a pool, a libvirt host opens the kernel, the initrd, the root image and the disks
at the paths they have here: right for ``qemu:///system`` (no copies) and for lab hosts
that mount the same filesystem. With one (``--libvirt-pool NAME``, the scenario key
``libvirt_pool``), everything the domain opens is a volume of that pool:

- the image's kernel, initrd and root image are uploaded once, named by their content's
  sha256, and kept: the next run on that host reuses them (``stage_image``). A volume is
  complete when its ``.ok`` marker volume exists; a run finding it without one waits for
  the run that is uploading it;
- each disk of a guest is uploaded into a volume of its own for that guest
  (``RunVolumes``), and once the guest has stopped a writable one is downloaded back over
  the host file, so callers read the disk as they do after a QEMU run; the guest's root
  overlay (``harness.vm.overlays``) is a qcow2 volume over the image's, made by libvirt
  there; the guest's volumes are deleted on every exit path.

Transfers are sparse streams (virStorageVolUpload/Download with the SPARSE_STREAM flag):
a mostly empty scratch disk costs its data, not its size.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness import paths
from harness.errors import HarnessError
from harness.image.build import Image
from harness.vm import libvirtd, overlays
from harness.vm.base import Disk

log = logging.getLogger("crashlab.libvirt")

# Pools whose volumes are files the domain can name as <kernel> and <disk type='file'>.
_FILE_POOLS = ("dir", "fs", "netfs")
# How long a run waits for another run's upload of the same image to complete.
UPLOAD_WAIT = 600.0
# What to do when a libvirt host without a pool cannot open a file of ours.
SHARE_HINT = (
    "a libvirt host opens the kernel, the disks and the root image at the paths "
    "they have here: they must be on a filesystem it shares at the same paths (the "
    "lab's cache, with the images and the guests' root overlays, and the run's "
    "disks), or give it a storage pool to upload them into "
    "(--libvirt-pool NAME)"
)


def open_pool(conn: Any, uri: str, name: str) -> Any:
    """The active, file-backed storage pool ``name`` of the libvirt host.

    :raise HarnessError: no such pool, not active, or not one of files (exit 3, with the
        ``virsh`` commands that fix it).
    """
    libvirt = libvirtd.module()
    virsh = f"virsh -c {uri}"
    try:
        pool = conn.storagePoolLookupByName(name)
    except libvirt.libvirtError as e:
        if e.get_error_code() != libvirt.VIR_ERR_NO_STORAGE_POOL:
            raise HarnessError(f"libvirt storage pool {name!r} on {uri}: {e}") from None
        raise HarnessError(
            f"libvirt storage pool {name!r} does not exist on {uri}",
            hint=f"see `{virsh} pool-list --all`; to make one: `{virsh} pool-define-as {name} "
            f"dir --target /var/lib/libvirt/crashlab && {virsh} pool-build {name} && "
            f"{virsh} pool-start {name}`",
        ) from None
    if not pool.isActive():
        raise HarnessError(
            f"libvirt storage pool {name!r} on {uri} is not active",
            hint=f"start it: `{virsh} pool-start {name}` (and `pool-autostart {name}`)",
        )
    kind = ET.fromstring(pool.XMLDesc(0)).get("type")
    if kind not in _FILE_POOLS:
        raise HarnessError(
            f"libvirt storage pool {name!r} on {uri} is of type {kind!r}: the lab needs "
            "volumes that are files (the kernel and initrd are booted from them)",
            hint="use a pool of type " + ", ".join(_FILE_POOLS),
        )
    return pool


def pool_dir(pool: Any) -> str:
    """The pool's target directory on the libvirt host."""
    return ET.fromstring(pool.XMLDesc(0)).findtext("target/path") or ""


# -- the image: uploaded once per content --------------------------------------------------


def stage_image(pool: Any, image: Image) -> Image:
    """``image`` with its kernel, initrd and root image as volumes of ``pool`` (their
    paths on the libvirt host), uploading the ones the pool does not hold yet."""
    return replace(
        image,
        kernel=Path(content_volume(pool, image.kernel)),
        initrd=Path(content_volume(pool, image.initrd)),
        rootfs=Path(content_volume(pool, image.rootfs)),
    )


def content_volume(pool: Any, path: Path) -> str:
    """The path on the libvirt host of ``pool``'s volume with ``path``'s content, uploaded
    unless the pool has it."""
    libvirt = libvirtd.module()
    name = f"crashlab-{content_hash(path)[:24]}-{path.name}"
    if _lookup(pool, name + ".ok") is None:
        try:
            vol = create_volume(pool, name, path.stat().st_size)
        except libvirt.libvirtError as e:
            if e.get_error_code() != libvirt.VIR_ERR_STORAGE_VOL_EXIST:
                raise _error(pool, f"could not create volume {name}", e) from None
            _wait_for_marker(pool, name)
        else:
            try:
                upload(vol, path)
                create_volume(pool, name + ".ok", 0)
            except BaseException:
                with contextlib.suppress(libvirt.libvirtError):
                    vol.delete(0)
                raise
    return str(pool.storageVolLookupByName(name).path())


def _wait_for_marker(pool: Any, name: str) -> None:
    """Another run is uploading ``name`` (or one was killed while it did)."""
    deadline = time.monotonic() + UPLOAD_WAIT
    log.info("volume %s is being uploaded by another run: waiting", name)
    while _lookup(pool, name + ".ok") is None:
        if time.monotonic() > deadline:
            raise HarnessError(
                f"volume {name} of pool {pool.name()} stayed incomplete for "
                f"{UPLOAD_WAIT:g} s (a run uploading it was killed?)",
                hint=f"delete it: `virsh vol-delete --pool {pool.name()} {name}`",
            )
        time.sleep(1.0)


def content_hash(path: Path) -> str:
    """sha256 of the file, remembered per (path, size, mtime, inode): the root image is a
    gigabyte, and hashing it took 2.8 s here, on every run."""
    st = path.stat()
    where = str(path.resolve())
    key = [where, st.st_size, st.st_mtime_ns, st.st_ino]
    memo = paths.cache_dir() / "content-hash" / hashlib.sha256(where.encode()).hexdigest()[:32]
    with contextlib.suppress(OSError, ValueError):
        saved = json.loads(memo.read_text())
        if saved["key"] == key:
            return str(saved["sha256"])
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    memo.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo.with_suffix(f".{os.getpid()}")
    tmp.write_text(json.dumps({"key": key, "sha256": digest}))
    tmp.replace(memo)
    return digest


# -- a guest's disks: uploaded, downloaded back, deleted ------------------------------------


@dataclass
class _Placed:
    disk: Disk  # the caller's disk, at its path here
    vol: Any


class RunVolumes:
    """The volumes of one guest's disks. ``put`` uploads a disk; ``take_back`` (after the
    guest let go of it) downloads a writable one over its host file and deletes the
    volume; ``close`` does that for every disk left, once the domain has stopped."""

    def __init__(self, pool: Any, prefix: str):
        self.pool = pool
        self.prefix = prefix
        self._placed: dict[str, _Placed] = {}

    def put(self, disk: Disk) -> Disk:
        """``disk`` as the domain sees it: the same disk, at its volume's path."""
        libvirt = libvirtd.module()
        name = f"{self.prefix}-{disk.serial}"
        try:
            vol = create_volume(self.pool, name, disk.path.stat().st_size)
        except libvirt.libvirtError as e:
            raise _error(self.pool, f"could not create volume {name}", e) from None
        self._placed[disk.serial] = _Placed(disk, vol)
        upload(vol, disk.path)
        return replace(disk, path=Path(vol.path()))

    def overlay(self, base: Path) -> Path:
        """A qcow2 volume over the pool's image volume ``base`` for the guest's root disk
        (``harness.vm.overlays``), made by libvirt on its host and deleted with the
        guest's other volumes; its path there."""
        libvirt = libvirtd.module()
        name = f"{self.prefix}-{overlays.ROOT_SERIAL}"
        vol = ET.Element("volume")
        ET.SubElement(vol, "name").text = name
        # No capacity: libvirt gives the overlay its backing image's size.
        ET.SubElement(ET.SubElement(vol, "target"), "format", type="qcow2")
        backing = ET.SubElement(vol, "backingStore")
        ET.SubElement(backing, "path").text = str(base)
        ET.SubElement(backing, "format", type="qcow2")
        try:
            made = self.pool.createXML(ET.tostring(vol, encoding="unicode"), 0)
        except libvirt.libvirtError as e:
            raise _error(self.pool, f"could not create volume {name}", e) from None
        # A snapshot disk: deleted, never downloaded (take_back).
        root = Disk(base, overlays.ROOT_SERIAL, format="qcow2", snapshot=True)
        self._placed[root.serial] = _Placed(root, made)
        return Path(made.path())

    def take_back(self, serial: str, *, download: bool = True) -> None:
        placed = self._placed.pop(serial)
        try:
            if download and not (placed.disk.readonly or placed.disk.snapshot):
                fetch(placed.vol, placed.disk.path)
        finally:
            with contextlib.suppress(libvirtd.module().libvirtError):
                placed.vol.delete(0)

    def close(self, *, download: bool) -> None:
        """Every disk left: downloaded back (when ``download``: the domain ran) and its
        volume deleted, even if one of them fails; the first failure is raised."""
        failed: BaseException | None = None
        for serial in list(self._placed):
            try:
                self.take_back(serial, download=download)
            except BaseException as e:  # the other volumes are still deleted
                failed = failed or e
        if failed is not None:
            raise failed


# -- the libvirt calls -----------------------------------------------------------------------


def create_volume(pool: Any, name: str, size: int) -> Any:
    """An empty, sparse (allocation 0) volume of ``size`` bytes. Always raw to libvirt: it
    holds the file's bytes as they are; the domain's disk says how to read them."""
    vol = ET.Element("volume")
    ET.SubElement(vol, "name").text = name
    ET.SubElement(vol, "capacity", unit="bytes").text = str(size)
    ET.SubElement(vol, "allocation", unit="bytes").text = "0"
    ET.SubElement(ET.SubElement(vol, "target"), "format", type="raw")
    return pool.createXML(ET.tostring(vol, encoding="unicode"), 0)


def upload(vol: Any, path: Path) -> None:
    """The file's bytes into ``vol``, holes sent as holes."""
    libvirt = libvirtd.module()
    start = time.monotonic()
    size = path.stat().st_size
    stream = vol.connect().newStream(0)
    with open(path, "rb") as f:
        fd = f.fileno()
        try:
            vol.upload(stream, 0, size, libvirt.VIR_STORAGE_VOL_UPLOAD_SPARSE_STREAM)
            stream.sparseSendAll(
                lambda _st, n, _o: os.read(fd, n),
                lambda _st, _o: _section(fd, size),
                lambda _st, n, _o: os.lseek(fd, n, os.SEEK_CUR),
                None,
            )
            stream.finish()
        except BaseException as e:
            with contextlib.suppress(libvirt.libvirtError):
                stream.abort()
            if isinstance(e, libvirt.libvirtError):
                raise HarnessError(
                    f"upload of {path} into volume {vol.name()} failed: {e}"
                ) from None
            raise
    log.info("uploaded %s (%d bytes) into %s in %.2f s", path, size, vol.name(), _since(start))


def _section(fd: int, size: int) -> tuple[bool, int]:
    """(in data?, bytes to the section's end) at the file's offset, as sparseSendAll asks."""
    here = os.lseek(fd, 0, os.SEEK_CUR)
    if here >= size:
        return True, 0
    try:
        data = os.lseek(fd, here, os.SEEK_DATA)
    except OSError:  # ENXIO: only a hole is left
        data = size
    end = os.lseek(fd, here, os.SEEK_HOLE) if data == here else data
    # SEEK_DATA/SEEK_HOLE move the offset: the handlers read or skip from ``here``.
    os.lseek(fd, here, os.SEEK_SET)
    return data == here, min(end, size) - here


def fetch(vol: Any, path: Path) -> None:
    """``vol``'s bytes over ``path`` (holes as holes), through a file beside it that
    replaces it at the end: an interrupted download leaves the old file whole."""
    libvirt = libvirtd.module()
    start = time.monotonic()
    part = path.with_name(path.name + ".download")
    stream = vol.connect().newStream(0)
    try:
        with open(part, "wb") as f:
            fd = f.fileno()
            vol.download(stream, 0, 0, libvirt.VIR_STORAGE_VOL_DOWNLOAD_SPARSE_STREAM)
            stream.sparseRecvAll(
                lambda _st, data, _o: os.write(fd, data),
                lambda _st, n, _o: os.lseek(fd, n, os.SEEK_CUR),
                None,
            )
            stream.finish()
            # A trailing hole moved the offset only: the file gets its full length.
            f.truncate(vol.info()[1])
        with contextlib.suppress(OSError):
            os.chmod(part, path.stat().st_mode & 0o7777)
        part.replace(path)
    except BaseException as e:
        with contextlib.suppress(libvirt.libvirtError):
            stream.abort()
        part.unlink(missing_ok=True)
        if isinstance(e, libvirt.libvirtError):
            raise HarnessError(f"download of volume {vol.name()} to {path} failed: {e}") from None
        raise
    log.info("downloaded %s to %s in %.2f s", vol.name(), path, _since(start))


def _lookup(pool: Any, name: str) -> Any:
    libvirt = libvirtd.module()
    try:
        return pool.storageVolLookupByName(name)
    except libvirt.libvirtError as e:
        if e.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_VOL:
            return None
        raise _error(pool, f"could not look up volume {name}", e) from None


def _error(pool: Any, what: str, e: Any) -> HarnessError:
    return HarnessError(f"libvirt storage pool {pool.name()}: {what}: {e}")


def _since(start: float) -> float:
    return time.monotonic() - start
