"""The image cache: keyed by the recipe's hash; pruning keeps the current recipe's image."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import paths
from harness.cli import main as cli
from harness.image import build as image


def test_recipe_hash_follows_every_recipe_file(tmp_path: Path) -> None:
    d = tmp_path / "images"
    d.mkdir()
    (d / "recipe.toml").write_text("a = 1\n")
    (d / "init").write_text("#!/bin/sh\n")
    h1 = image.recipe_hash(d)
    (d / "init").write_text("#!/bin/sh\necho\n")
    assert image.recipe_hash(d) != h1
    (d / "init").write_text("#!/bin/sh\n")
    assert image.recipe_hash(d) == h1


def test_prune_keeps_the_current_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRASHLAB_CACHE", str(tmp_path))
    keep = image.load_recipe().hash
    imgs = paths.images_dir()
    for name in (keep, "0123456789abcdef", "0123456789abcdef.partial"):
        (imgs / name).mkdir(parents=True)
        (imgs / name / "rootfs.qcow2").write_bytes(b"x" * 100)
    (imgs / f"{keep}.build.log").write_text("log")
    (imgs / "0123456789abcdef.build.log").write_text("log")
    assert cli.main(["image", "prune"]) == 0
    assert sorted(p.name for p in imgs.iterdir()) == [keep, f"{keep}.build.log"]


def test_no_image_is_a_clear_harness_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRASHLAB_CACHE", str(tmp_path))
    with pytest.raises(image.ImageError) as exc:
        image.require_image()
    assert "scenario image build" in (exc.value.hint or "")
