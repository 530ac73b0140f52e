"""Which VM backend boots a scenario's guests: the ``backend`` and ``libvirt_uri`` keys
every scenario kind shares (``--backend``, ``--libvirt-uri`` and ``CRASHLAB_BACKEND`` on
the command line set the same keys). They are part of the run's stored parameters, so
every run records where its guests ran.

``libvirt_pool`` (``--libvirt-pool``) is not: it says how the guest's files reach the
libvirt host (uploaded into that storage pool, ``harness.vm.libvirt_storage``), which
changes nothing a run checks, so a run resumes with another pool or none."""

from __future__ import annotations

from enum import StrEnum
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from harness.config.settings import Settings, problem

DEFAULT_LIBVIRT_URI = "qemu:///system"


class Backend(StrEnum):
    QEMU = "qemu"
    LIBVIRT = "libvirt"


class VmChoice(Settings):
    """The base of every scenario model: the backend its guests boot on."""

    backend: Backend = Field(
        Backend.QEMU,
        description="qemu: a QEMU process per guest; libvirt: a transient libvirt domain",
    )
    libvirt_uri: str = Field(
        DEFAULT_LIBVIRT_URI,
        description="libvirt connection URI (backend = libvirt), e.g. qemu+ssh://HOST/system",
    )

    kernel: str | None = Field(
        None,
        description="the guest kernel to boot, by release (`scenario kernel list`; "
        "`scenario kernel add` brings one); unset: the image's own",
    )

    libvirt_pool: str = Field(
        "",
        exclude=True,
        description="a storage pool on the libvirt host to upload the kernel, initrd, root "
        "image and disks into, for a host that does not share this host's files; empty: "
        "it opens them at our paths (this host, or a shared filesystem)",
    )

    @field_validator("libvirt_uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        if "://" not in value or not urlsplit(value).scheme:
            raise problem(
                "expected a libvirt URI",
                hint="e.g. qemu:///system (this host) or qemu+ssh://HOST/system",
            )
        return value
