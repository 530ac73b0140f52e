"""The image cache: keyed by the recipe's hash; pruning keeps the current recipe's image."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import paths, proc, tools
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


def test_build_timeline_names_each_phase_once_it_ends(tmp_path: Path) -> None:
    """mmdebstrap's phases (its own `I:` lines, as a real build log has them) and the
    lab's steps, each printed with its seconds when the next begins; a line still being
    written is read only once it is whole."""
    import io

    from rich.console import Console

    from harness.cli.image import _Timeline

    out = io.StringIO()
    log = tmp_path / "build.log"
    timeline = _Timeline(Console(file=out, width=200), log)
    timeline.begin("mmdebstrap")
    log.write_text("$ mmdebstrap --mode=root\nI: running apt-get update...\nI: downloading pack")
    timeline.poll()
    with open(log, "a") as f:
        f.write("ages with apt...\nW: not a phase\nI: running --customize-hook directly: /x\n")
    timeline.poll()
    with open(log, "a") as f:  # written just before the build's next step, not yet polled
        f.write("I: cleaning package lists and apt cache...\n")
    timeline.step("qcow2")
    timeline.begin(None)
    names = [line.split(" s  ", 1)[1] for line in out.getvalue().splitlines()]
    assert names == [
        "mmdebstrap",
        "mmdebstrap: running apt-get update",
        "mmdebstrap: downloading packages with apt",
        "mmdebstrap: running --customize-hook directly",
        "mmdebstrap: cleaning package lists and apt cache",
        "qcow2",
    ]


def test_the_image_s_rebuilt_fsck_jfs_serves_the_host_and_marks_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """images/jfsutils replaces the image's fsck.jfs; the build hands that binary to the
    host (paths.lab_bin, searched first) and records the package as the lab's build, so
    no verdict of Debian's broken replay is reused for it."""
    monkeypatch.setenv("CRASHLAB_CACHE", str(tmp_path / "cache"))
    chroot = tmp_path / "chroot"
    (chroot / "sbin").mkdir(parents=True)
    (chroot / "etc").mkdir()
    (chroot / "var/lib/dpkg").mkdir(parents=True)
    (chroot / "var/lib/dpkg/status").write_text("Package: jfsutils\nVersion: 1.1.15-5\n\n")
    fsck = chroot / "sbin/jfs_fsck"
    fsck.write_text("#!/bin/sh\necho lab build\n")
    fsck.chmod(0o755)
    image._export_lab_tools(chroot)  # no marker: Debian's stays
    assert not paths.lab_bin().exists()
    assert image._package_versions(chroot)["jfsutils"] == "1.1.15-5"
    (chroot / image.JFSUTILS_FIX).write_text("fixed\n")
    image._export_lab_tools(chroot)
    assert sorted(p.name for p in paths.lab_bin().iterdir()) == ["fsck.jfs", "jfs_fsck"]
    found = tools.require("fsck.jfs")
    assert tools.lab_built(found) and proc.run(["fsck.jfs"]).stdout == "lab build\n"
    assert image._package_versions(chroot)["jfsutils"] == "1.1.15-5+crashlab-logredo-fix"
