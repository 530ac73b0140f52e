"""Which VM backend boots a scenario's guests: the ``backend`` and ``libvirt_uri`` keys
every scenario kind shares (``--backend``, ``--libvirt-uri`` and ``CRASHLAB_BACKEND`` on
the command line set the same keys). They are part of the run's stored parameters, so
every run records where its guests ran."""

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

    @field_validator("libvirt_uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        if "://" not in value or not urlsplit(value).scheme:
            raise problem(
                "expected a libvirt URI",
                hint="e.g. qemu:///system (this host) or qemu+ssh://HOST/system",
            )
        return value
