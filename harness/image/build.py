"""The guest image: built from ``images/recipe.toml`` with mmdebstrap, cached by recipe hash.

Layout of one cached image (``~/.cache/crashlab/images/<hash>/``)::

    rootfs.qcow2   the root filesystem (ext4 made with ``mkfs.ext4 -d``)
    vmlinuz        the pinned kernel, booted directly
    initrd.img     virtio + ext4 only
    manifest.json  recipe hash, kernel, ZFS version, sizes, build time

A build happens in ``<hash>.partial`` and is renamed into place only when complete, so a
half-built image is never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from harness import paths, proc, tools
from harness.config import settings
from harness.config.settings import Settings, Size, load_toml
from harness.errors import ImageError

SECURITY_MIRROR = "http://deb.debian.org/debian-security"


class Recipe(Settings):
    """``images/recipe.toml``: what the guest image is built from."""

    path: Path
    suite: str
    mirror: str
    components: tuple[str, ...] = ("main",)
    kernel: str = Field(description="the pinned guest kernel release")
    variant: Literal[
        "extract",
        "custom",
        "essential",
        "apt",
        "required",
        "minbase",
        "buildd",
        "important",
        "debootstrap",
        "standard",
    ] = "apt"
    rootfs_size: Size = 2 << 30
    packages: tuple[str, ...] = ()
    backports: tuple[str, ...] = ()
    initrd_modules: tuple[str, ...] = ()
    hash: str


@dataclass(frozen=True)
class Image:
    dir: Path
    rootfs: Path
    kernel: Path
    initrd: Path
    manifest: dict[str, object]

    @property
    def hash(self) -> str:
        return str(self.manifest["recipe_hash"])


def recipe_hash(recipe_dir: Path) -> str:
    """sha256 over every file of the recipe directory (names and contents), short form."""
    h = hashlib.sha256()
    # The kernel config fragment (kernel-fragment.config) sits here with the image's other
    # build inputs, but goes into kernels built from source, never into the image.
    files = (p for p in recipe_dir.rglob("*") if p.is_file() and not p.match("kernel-*.config"))
    for f in sorted(files):
        h.update(f.relative_to(recipe_dir).as_posix().encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def load_recipe(recipe_dir: Path | None = None) -> Recipe:
    """:raise InputError: the recipe file is missing or invalid (file, key, value)."""
    recipe_dir = recipe_dir or paths.recipe_dir()
    path = recipe_dir / "recipe.toml"
    data = {**load_toml(path), "path": path, "hash": recipe_hash(recipe_dir)}
    recipe: Recipe = settings.validate(path, Recipe, data)
    return recipe


def cached(recipe: Recipe | None = None) -> Image | None:
    """The image for ``recipe`` if it is in the cache and complete, else None."""
    recipe = recipe or load_recipe()
    d = paths.images_dir() / recipe.hash
    return _open(d)


def _open(d: Path) -> Image | None:
    manifest = d / "manifest.json"
    if not manifest.is_file():
        return None
    files = [d / "rootfs.qcow2", d / "vmlinuz", d / "initrd.img"]
    if not all(f.is_file() for f in files):
        return None
    return Image(d, files[0], files[1], files[2], json.loads(manifest.read_text()))


# The kernel a run boots instead of the image's own (``harness/kernel``): chosen for the
# whole run by the lifecycle, so every guest any step boots -- recorder, checks, probes,
# on either backend -- gets it from require_image() with nothing passed down.
_boot_with: Callable[[Image], Image] | None = None


@contextmanager
def booting(swap: Callable[[Image], Image] | None) -> Iterator[None]:
    """Within: ``require_image()`` returns ``swap(image)`` (the root image with another
    kernel and its initrd); None leaves the image's own."""
    global _boot_with
    before, _boot_with = _boot_with, swap
    try:
        yield
    finally:
        _boot_with = before


def require_image() -> Image:
    """The image to boot: the current recipe's, or the one ``$CRASHLAB_IMAGE`` names (a
    cached hash or an image directory), with the kernel ``booting()`` chose, if any."""
    img = _root_image()
    return _boot_with(img) if _boot_with is not None else img


def _root_image() -> Image:
    if chosen := os.environ.get("CRASHLAB_IMAGE"):
        d = Path(chosen) if "/" in chosen else paths.images_dir() / chosen
        img = _open(d)
        if img is None:
            raise ImageError(
                f"CRASHLAB_IMAGE={chosen}: no complete image there",
                hint="scenario image status lists the cached images",
            )
        return img
    img = cached()
    if img is None:
        raise ImageError(
            "the guest image for the current recipe is not built",
            hint="run: scenario image build  (about 6 minutes, once per recipe change)",
        )
    return img


def all_cached() -> list[Image]:
    d = paths.images_dir()
    if not d.is_dir():
        return []
    return [img for p in sorted(d.iterdir()) if (img := _open(p)) is not None]


Step = Callable[[str], None]


def _require_builder() -> None:
    """The host tools, and root: mmdebstrap builds in root mode."""
    for tool in ("mmdebstrap", "mkfs.ext4", "qemu-img"):
        tools.require(tool)
    if os.geteuid() != 0:
        raise ImageError(
            "building the image needs root (mmdebstrap in root mode)",
            hint="run it as root, e.g. sudo scenario image build",
        )


def _boot_files(recipe: Recipe, chroot: Path, work: Path, logfile: Path) -> dict[str, object]:
    """The kernel and initrd copied out of the chroot; the manifest of what it holds."""
    boot = chroot / "boot"
    try:
        shutil.copy2(boot / f"vmlinuz-{recipe.kernel}", work / "vmlinuz")
        shutil.copy2(boot / "crashlab-initrd.img", work / "initrd.img")
    except FileNotFoundError as e:
        raise ImageError(
            f"image build: {e.filename} missing after mmdebstrap", hint=f"full log: {logfile}"
        ) from None
    return {
        "recipe_hash": recipe.hash,
        "suite": recipe.suite,
        "kernel": recipe.kernel,
        "zfs_version": _zfs_version(chroot),
        "packages": _package_versions(chroot),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def build(
    recipe: Recipe | None = None, *, force: bool = False, on_step: Step = lambda s: None
) -> tuple[Image, bool]:
    """Build the image for ``recipe`` unless cached. Returns (image, built_now)."""
    recipe = recipe or load_recipe()
    if not force and (img := cached(recipe)) is not None:
        return img, False
    _require_builder()
    final = paths.images_dir() / recipe.hash
    work = final.with_name(recipe.hash + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    logfile = paths.images_dir() / f"{recipe.hash}.build.log"
    logfile.write_text(f"crashlab image build {recipe.hash} at {time.ctime()}\n")
    started = time.monotonic()
    chroot = work / "chroot"

    def step(name: str, argv: list[str | Path], env: dict[str, str] | None = None) -> None:
        on_step(name)
        proc.logged(argv, logfile, f"image build step '{name}'", error=ImageError, env=env)

    step(
        "mmdebstrap: packages, kernel, zfs-dkms build",
        _mmdebstrap_argv(recipe, chroot),
        env={
            "CRASHLAB_INITRD_MODULES": " ".join(recipe.initrd_modules),
            "CRASHLAB_MIRROR": recipe.mirror,  # images/jfsutils fetches its source there
        },
    )

    _export_lab_tools(chroot)
    on_step("kernel and initrd")
    manifest = _boot_files(recipe, chroot, work, logfile)

    raw = work / "rootfs.raw"
    step(
        "root filesystem (mkfs.ext4 -d)",
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-L",
            "crashlab-root",
            "-d",
            chroot,
            raw,
            str(recipe.rootfs_size // 1024) + "K",
        ],
    )
    shutil.rmtree(chroot)
    step("qcow2", ["qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, work / "rootfs.qcow2"])
    raw.unlink()

    manifest["build_seconds"] = round(time.monotonic() - started, 1)
    manifest["size_bytes"] = sum(f.stat().st_size for f in work.iterdir())
    (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    work.rename(final)
    img = _open(final)
    assert img is not None
    return img, True


def _mmdebstrap_argv(r: Recipe, chroot: Path) -> list[str | Path]:
    comps = " ".join(r.components)
    sources = [
        f"deb {r.mirror} {r.suite} {comps}",
        f"deb {r.mirror} {r.suite}-updates {comps}",
        f"deb {SECURITY_MIRROR} {r.suite}-security {comps}",
        f"deb {r.mirror} {r.suite}-backports {comps}",
    ]
    include = [
        *r.packages,
        f"linux-image-{r.kernel}",
        f"linux-headers-{r.kernel}",
        *r.backports,
    ]
    return [
        "mmdebstrap",
        "--mode=root",
        f"--variant={r.variant}",
        "--include=" + ",".join(include),
        # backports packages are pinned by images/zfs.pref, written before apt resolves.
        "--setup-hook=" + str(r.path.parent / "setup-hook"),
        "--customize-hook=" + str(r.path.parent / "customize"),
        r.suite,
        chroot,
        *sources,
    ]


def _zfs_version(chroot: Path) -> str | None:
    return _package_versions(chroot).get("zfsutils-linux")


def _package_versions(chroot: Path) -> dict[str, str]:
    status = chroot / "var/lib/dpkg/status"
    if not status.exists():
        return {}
    wanted = {
        "zfsutils-linux",
        "zfs-dkms",
        "e2fsprogs",
        "xfsprogs",
        "btrfs-progs",
        "dmsetup",
        "fio",
        "qemu-guest-agent",
        "udev",
        "python3",
        "jfsutils",
    }
    out: dict[str, str] = {}
    for stanza in status.read_text(errors="replace").split("\n\n"):
        fields = dict(
            line.split(": ", 1)
            for line in stanza.splitlines()
            if ": " in line and not line.startswith(" ")
        )
        name = fields.get("Package")
        if name and (name in wanted or name.startswith("linux-image-")):
            out[name] = fields.get("Version", "?")
    if "jfsutils" in out and (chroot / JFSUTILS_FIX).exists():
        # images/jfsutils rebuilt its fsck.jfs: a verdict of Debian's must not be reused.
        out["jfsutils"] += "+crashlab-logredo-fix"
    return out


# What images/jfsutils leaves in the image when it replaced Debian's fsck.jfs.
JFSUTILS_FIX = "etc/crashlab-jfsutils-fix"


def _export_lab_tools(chroot: Path) -> None:
    """The image's rebuilt fsck.jfs for the host's checks too (paths.lab_bin): the host is
    Debian 12 as the image is, so the binary runs there; each name replaced atomically."""
    if not (chroot / JFSUTILS_FIX).exists():
        return
    dest = paths.lab_bin()
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("fsck.jfs", "jfs_fsck"):
        part = dest / f".{name}.partial"
        shutil.copy2(chroot / "sbin/jfs_fsck", part)
        part.rename(dest / name)
