"""The guest's copy of the programs, unpacked on the host (as ``install_scripts`` does
in a guest): a test runs a program from it as the guest would, with ``python -I``."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from harness.record import guestfiles


def unpack(into: Path) -> Path:
    """The archive the guest gets, unpacked into ``into``; its launchers are
    ``into/<program>.py``."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(guestfiles.archive())) as tar:
        tar.extractall(into, filter="data")
    return into
