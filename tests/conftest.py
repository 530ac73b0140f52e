"""Shared fixtures. Tests marked ``vm`` boot the real guest image; they need it built
(``scenario image build``, which ``make test`` runs first) and skip with a clear reason
when it is not, so a unit-test run on a laptop stays possible."""

from __future__ import annotations

import pytest

from harness.image import build as image


@pytest.fixture(scope="session")
def guest_image() -> image.Image:
    img = image.cached()
    if img is None:
        pytest.skip("guest image not built: run `scenario image build` (make test does)")
    return img
