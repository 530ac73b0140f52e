"""One cache entry being made (``<name>.partial``) and put into place, the same for every
kernel source (``add.py``, ``mutant.py``)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.kernel.store import Kernel, kernels_dir, write_manifest

Step = Callable[[str, float], None]  # (what was done, seconds it took)


def fresh(name: str) -> Path:
    """An empty ``<name>.partial`` to build the entry in."""
    work = kernels_dir() / f"{name}.partial"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


def timed(on_step: Step, what: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, its time told to ``on_step``."""
    t = time.monotonic()
    out = fn()
    on_step(what, time.monotonic() - t)
    return out


def install(work: Path, k: Kernel) -> Kernel:
    """Keep the entry's files (vmlinuz, initrd, config, manifest), rename it into place."""
    for d in ("dl", "root", "tree", "initrd", "src", "base"):
        shutil.rmtree(work / d, ignore_errors=True)
    final = kernels_dir() / k.name
    write_manifest(work, k)
    shutil.rmtree(final, ignore_errors=True)
    work.rename(final)
    return Kernel(k.name, k.release, k.source, k.options, k.modules, final)
