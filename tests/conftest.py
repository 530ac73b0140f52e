"""Shared fixtures. Tests marked ``vm`` boot the real guest image; they need it built
(``scenario image build``, which ``make test`` runs first) and skip with a clear reason
when it is not, so a unit-test run on a laptop stays possible."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.image import build as image
from harness.record.logwrites import Log, open_log
from tests.synth import make_store

# pytest-xdist's workers run with COLUMNS=80 and LINES=24 in their environment, which the
# lab's console takes as a user's choice -- and the commands' module-level consoles take
# it at import, during collection, before any fixture: dropped here, first, so a test of
# piped output (or of a command's, in a child) sees what a pipe would, as without workers.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)


@pytest.fixture(scope="session")
def guest_image() -> image.Image:
    img = image.cached()
    if img is None:
        pytest.skip("guest image not built: run `scenario image build` (make test does)")
    return img


@pytest.fixture
def db(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The one synthetic store of the report tests (tests/synth.py): its path and the run
    ids by name. Tests that need another store define their own ``db``."""
    path = tmp_path / "lab.sqlite"
    return path, make_store(path)


REAL_LOGS = Path(__file__).parent / "data" / "logs"


def real_log(name: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Recorded log ``name`` (tests/data/logs/README.md), decompressed, and what was
    measured of it (device size, hashes, counts)."""
    out = tmp_path_factory.mktemp("reallog") / "log.raw"
    with gzip.open(REAL_LOGS / f"{name}.log.gz", "rb") as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return out, dict(json.loads((REAL_LOGS / f"{name}.json").read_text()))


@pytest.fixture(scope="session")
def ext4_small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The recorded ext4 ops log, decompressed once per session."""
    return real_log("ext4-ops-small", tmp_path_factory)


@pytest.fixture()
def ext4_small_log(ext4_small: tuple[Path, dict[str, Any]]) -> Iterator[Log]:
    """The recorded ext4 ops log, open."""
    with open_log(ext4_small[0]) as lg:
        yield lg
