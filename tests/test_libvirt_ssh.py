"""The libvirt backend over libvirt's remote transport: ``qemu+ssh://`` to a private sshd
on a free loopback port, with a throw-away host key and user key (no second host here,
but the same path a lab host's URI takes: ssh, then virt-ssh-helper on the far side).

Nothing of the host's ssh setup is read or changed: the URI's ``command=`` is a wrapper
that gives ssh its own config (this key, a known_hosts holding only our host key, strict
checking), so no ``no_verify`` either. Skipped, with the reason, where sshd cannot run.

With a storage pool (``--libvirt-pool``) the same transport stands in for a lab host that
shares no file with us: the pool's directory is neither the work directory nor the image
cache, the domain names only its volumes, and the console comes through a stream.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import paths, proc
from harness.errors import GuestPanic
from harness.image import build as image
from harness.vm import accel, backend, libvirtd
from harness.vm.backend import Disk, GuestSpec, start_guest
from harness.vm.libvirt import LibvirtGuest
from tests.test_libvirt_storage import dir_pool, volumes
from tests.test_vm import crashlab_domains

# exclusive: asserts on every libvirt domain of the host (make test runs it alone).
pytestmark = [pytest.mark.vm, pytest.mark.exclusive]

SSHD = Path("/usr/sbin/sshd")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sshd_config(d: Path, port: int) -> str:
    return "\n".join(
        [
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {d / 'host_key'}",
            f"PidFile {d / 'sshd.pid'}",
            f"AuthorizedKeysFile {d / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            # The throw-away directory is /tmp's, not a home directory sshd would vouch for.
            "StrictModes no",
            "",
        ]
    )


def _ssh_wrapper(d: Path, port: int) -> Path:
    """``ssh`` as libvirt will call it, with our config in front (``-F``)."""
    host_pub = (d / "host_key.pub").read_text().split()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    (d / "ssh_config").write_text(
        "\n".join(
            [
                "Host *",
                f"  IdentityFile {d / 'id'}",
                "  IdentitiesOnly yes",
                f"  UserKnownHostsFile {d / 'known_hosts'}",
                "  GlobalKnownHostsFile /dev/null",
                "  StrictHostKeyChecking yes",
                "  BatchMode yes",
                "",
            ]
        )
    )
    wrapper = d / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec ssh -F {d / "ssh_config"} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@dataclass(frozen=True)
class Sshd:
    uri: str  # a qemu+ssh URI for this host's libvirtd through the private sshd
    log: Path


@pytest.fixture(scope="module")
def sshd() -> Iterator[Sshd]:
    """A private sshd on a free loopback port, and the URI that goes through it."""
    if not SSHD.exists() or shutil.which("ssh") is None:
        pytest.skip("openssh-server / openssh-client are not installed (scripts/install-host-deps)")
    if os.geteuid() != 0:
        pytest.skip("a private sshd for root@127.0.0.1 needs root")
    # sshd refuses to start without its privilege separation directory.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    # The local daemon must answer first: a remote URI is never started by the lab.
    libvirtd.connect().close()
    with tempfile.TemporaryDirectory(prefix="crashlab-ssh-") as tmp:
        d = Path(tmp)
        for key in ("host_key", "id"):
            proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d / key])
        shutil.copy(d / "id.pub", d / "authorized_keys")
        port = _free_port()
        (d / "sshd_config").write_text(_sshd_config(d, port))
        argv = [SSHD, "-D", "-e", "-f", d / "sshd_config"]
        with proc.spawn(argv, output=d / "sshd.log", die_with_parent=True) as child:
            deadline = time.monotonic() + 10
            while True:
                if not child.alive():
                    pytest.skip(f"sshd did not start: {child.read_output().strip()[-500:]}")
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                if time.monotonic() > deadline:
                    pytest.skip(f"sshd did not listen on 127.0.0.1:{port} within 10 s")
                time.sleep(0.05)
            uri = f"qemu+ssh://root@127.0.0.1:{port}/system?command={_ssh_wrapper(d, port)}"
            yield Sshd(uri, d / "sshd.log")


def test_guest_over_qemu_ssh(guest_image: image.Image, sshd: Sshd) -> None:
    """Boot a guest through the ssh transport, run a command in it, and leave no
    domain behind."""
    before = crashlab_domains()
    backend.select("libvirt", sshd.uri)
    try:
        t = time.monotonic()
        with start_guest(GuestSpec()) as guest:
            assert isinstance(guest, LibvirtGuest) and guest.uri == sshd.uri
            assert guest.run(["uname", "-n"], check=True).out.strip() == "crashlab"
            booted = time.monotonic() - t
            # The domain is this host's libvirtd's, reached through ssh.
            assert guest.name in crashlab_domains()
    finally:
        backend._selected = None
    assert crashlab_domains() == before
    # It did go through ssh: our sshd let our key in.
    assert "Accepted publickey for root" in sshd.log.read_text()
    print(f"boot to command over qemu+ssh: {booted:.1f} s")


@dataclass(frozen=True)
class RemotePool:
    name: str
    dir: Path  # on the libvirt host (this one, reached through ssh)
    uri: str


@pytest.fixture(scope="module")
def remote_pool(sshd: Sshd) -> Iterator[RemotePool]:
    """A directory pool outside the work directory and the image cache, made with the
    local connection (the test's own setup, as a lab admin would make one); gone after
    the module, with the image volumes the first test uploaded and the second reused."""
    conn = libvirtd.connect()
    try:
        with dir_pool(conn) as (name, d):
            yield RemotePool(name, d, sshd.uri)
    finally:
        conn.close()


@pytest.fixture
def on_remote_pool(remote_pool: RemotePool) -> Iterator[RemotePool]:
    backend.select("libvirt", remote_pool.uri, remote_pool.name)
    try:
        yield remote_pool
    finally:
        backend._selected = None


# The image's three volumes, the KVM probe's initramfs (libvirt_accel: it boots the
# image's kernel volume) and a marker for each.
IMAGE_VOLUMES = 8


def _pool_volumes(pool: RemotePool) -> set[str]:
    conn = libvirtd.connect()
    try:
        return volumes(conn, pool.name)
    finally:
        conn.close()


def _scratch(path: Path) -> Disk:
    with open(path, "wb") as f:
        f.truncate(64 << 20)
    return Disk(path, "data")


def test_guest_on_a_storage_pool_over_qemu_ssh(
    guest_image: image.Image, on_remote_pool: RemotePool, tmp_path: Path
) -> None:
    """The domain opens only the pool's volumes; a file the guest writes to its disk is
    in our disk file once it has stopped, and what it writes to a hot-plugged disk once
    that is unplugged; the guest's own volumes are gone."""
    pool = on_remote_pool
    # The KVM probe's answer is cached per URI; a port this test used before would skip
    # the probe boot and its uploads (6 volumes, not 8): forget the cached answers.
    shutil.rmtree(paths.cache_dir() / "accel-libvirt", ignore_errors=True)
    disk = _scratch(tmp_path / "data.raw")
    hot = _scratch(tmp_path / "hot.raw")
    t = time.monotonic()
    with start_guest(GuestSpec(disks=(disk,), hotplug_ports=1)) as guest:
        assert isinstance(guest, LibvirtGuest)
        started = time.monotonic() - t
        dom = ET.fromstring(guest.xml)
        opened = [dom.findtext("os/kernel"), dom.findtext("os/initrd")]
        opened += [s.get("file") for s in dom.iterfind("devices/disk/source")]
        assert len(opened) == 4 and all(Path(str(p)).parent == pool.dir for p in opened)
        for ours in (tmp_path, guest.workdir, guest_image.dir):
            assert str(ours) not in guest.xml
        assert [s.get("type") for s in dom.iterfind("devices/serial")] == ["pty"]
        t = time.monotonic()
        assert guest.run(["uname", "-n"], check=True).out.strip() == "crashlab"
        command = time.monotonic() - t
        dev = guest.disk("data")
        guest.run(
            ["sh", "-c", f"mkfs.ext4 -q {dev} && mount {dev} /mnt && "
             "echo written-on-the-pool > /mnt/hello && umount /mnt"],
            check=True,
        )  # fmt: skip
        # The console reached our log through the stream.
        assert "crashlab-init: ready" in guest.console_log.read_text()
        path = guest.attach_disk(Disk(hot.path, "hot"))
        assert {v for v in _pool_volumes(pool) if v.startswith(guest.name)} == {
            f"{guest.name}-crashlab-root",
            f"{guest.name}-data",
            f"{guest.name}-hot",
        }
        guest.run(["sh", "-c", f"printf plugged | dd of={path} bs=512 seek=3 conv=fsync"])
        guest.detach_disk("hot")
        with open(hot.path, "rb") as f:
            f.seek(3 * 512)
            assert f.read(7) == b"plugged"
        assert {v for v in _pool_volumes(pool) if v.startswith(guest.name)} == {
            f"{guest.name}-crashlab-root",
            f"{guest.name}-data",
        }
    # Read on the host, in userspace, from our own file.
    r = proc.run(["debugfs", "-R", "cat /hello", disk.path])
    assert r.stdout == "written-on-the-pool\n"
    left = _pool_volumes(pool)
    assert not [v for v in left if v.startswith(guest.name)]
    # The image's three volumes, the KVM probe's initramfs (libvirt_accel: it boots the
    # image's kernel volume) and their markers; no overlay or other file either.
    assert len(left) == IMAGE_VOLUMES and set(os.listdir(pool.dir)) == left
    assert [v for v in left if v.endswith(accel.probe_initramfs().name)]
    assert crashlab_domains() == []
    print(f"pool guest: start (incl. uploads) to agent {started:.1f} s "
          f"(boot {guest.boot_seconds():.1f} s), first command {command:.2f} s")  # fmt: skip


def test_panic_seen_through_the_streamed_console(
    on_remote_pool: RemotePool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A panic is found in the console the stream copied; the guest's volumes are
    deleted on this exit path too, and the image is not uploaded again."""
    caplog.set_level(logging.INFO, logger="crashlab.libvirt")
    disk = _scratch(tmp_path / "data.raw")
    with start_guest(GuestSpec(disks=(disk,))) as guest, pytest.raises(GuestPanic) as exc:
        guest.run(["sh", "-c", "echo c > /proc/sysrq-trigger"], timeout=60)
    assert "panic" in exc.value.message.lower() or "oops" in exc.value.message.lower()
    assert "sysrq" in exc.value.console.lower()
    uploaded = [r.message for r in caplog.records if r.message.startswith("uploaded")]
    assert len(uploaded) == 1 and str(disk.path) in uploaded[0]
    # The first test's image and probe volumes, reused; this guest's own are gone.
    assert len(_pool_volumes(on_remote_pool)) == IMAGE_VOLUMES
    assert crashlab_domains() == []
