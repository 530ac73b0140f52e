"""What the host installs in a guest: the model package and the guest programs.

They go in as the package they are (``GUEST_DIR/harness/model``, ``.../guest``), so a
program imports the model as the host does -- one copy of each module, no path games --
and each program gets a launcher, ``GUEST_DIR/<program>.py``, that runs its ``main``
(``python3 GUEST_DIR/opgen.py run ...``: Python puts the launcher's folder first on the
path, where the package is). One tar archive crosses the agent, not a file at a time.
"""

from __future__ import annotations

import functools
import io
import json
import tarfile
from pathlib import Path

import harness
from harness import filesystems

HARNESS = Path(harness.__file__).resolve().parent
# The packages the guest imports: stdlib only, relative imports only (test_guest_package).
PACKAGES = ("model", "guest")
LAUNCHER = """\
# Written by the host (harness/record/guestfiles.py): runs harness.guest.{name}.
import sys

from harness.guest.{name} import main

sys.exit(main())
"""


def programs() -> list[str]:
    """The guest modules that are programs: those with a ``main``."""
    return sorted(
        p.stem for p in (HARNESS / "guest").glob("*.py") if "\ndef main(" in p.read_text()
    )


def files() -> dict[str, bytes]:
    """Every file the guest gets, by its path under ``GUEST_DIR``."""
    out = {"harness/__init__.py": (HARNESS / "__init__.py").read_bytes()}
    for package in PACKAGES:
        for f in sorted((HARNESS / package).rglob("*.py")):
            out[str(f.relative_to(HARNESS.parent))] = f.read_bytes()
    for name in programs():
        out[f"{name}.py"] = LAUNCHER.format(name=name).encode()
    # The guest's checkers read their commands from the host's one table of filesystems
    # (runner.filesystem), beside the runner.
    checkers = {
        name: {
            "check": list(fs.check),
            "repair": list(fs.repair),
            "before_mount": list(fs.before_mount),
        }
        for name, fs in filesystems.FILESYSTEMS.items()
    }
    table = json.dumps(checkers, sort_keys=True, default=list)
    out["harness/guest/filesystems.json"] = table.encode()
    return out


@functools.cache
def archive() -> bytes:
    """``files()`` as one tar archive (fixed times and owners: the same bytes each run)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in sorted(files().items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
