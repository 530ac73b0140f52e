"""Shared fixtures. Tests marked ``vm`` boot the real guest image; they need it built
(``scenario image build``, which ``make test`` runs first) and skip with a clear reason
when it is not, so a unit-test run on a laptop stays possible."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.image import build as image
from tests.synth import make_store


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
