"""A run as the crash-state core sees it: what its steps read of the lifecycle's run
(``harness/experiments/lifecycle.py``'s ``Run`` is one), so the core needs nothing
above it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from harness.store.db import Store

Progress = Callable[[str, int, int], None]  # (what, done, total)


class Run(Protocol):
    store: Store
    run_id: str
    seed: int

    @property
    def progress(self) -> Progress: ...

    @property
    def dir(self) -> Path: ...
