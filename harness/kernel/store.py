"""Kernels the lab can boot, cached under ``~/.cache/crashlab/kernels/<name>/``.

One entry holds ``vmlinuz``, its ``initrd.img`` (which carries the kernel's modules: see
``initrd.py``) and ``manifest.json``: the release, where it came from (a Debian package
and its version, a user's tree and the hash of its config, a tree the lab built and the
hashes of its source and merged config, or a mutant patch and its hash), the ``CONFIG_*``
options the lab needs and which out-of-tree modules it has. The image's own kernel is
always there too, as the default, with nothing cached.

A run on a kernel boots the cached root image with that kernel (``boot_image``): the root
image is never rebuilt for a kernel.
"""

from __future__ import annotations

import dataclasses
import difflib
import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import paths
from harness.errors import InputError
from harness.image.build import Image

# What the lab's experiments need of a kernel (harness/experiments/registry.py names
# which); a scenario on a kernel without one is refused before its run is recorded.
OPTIONS = (
    "DM_LOG_WRITES",
    "DM_FLAKEY",
    "DM_DUST",
    "VIRTIO_BLK",
    "VIRTIO_PCI",
    "EXT4_FS",
    "XFS_FS",
    "BTRFS_FS",
)


def kernels_dir() -> Path:
    return paths.cache_dir() / "kernels"


_held = 0  # how deep this process is in ``adding`` (the lock is taken once)


@contextmanager
def adding() -> Iterator[None]:
    """Within: this process alone adds entries to the kernel cache. Two runs, tests or
    Dask workers of one host wanting the same uncached kernel would both build it in one
    ``.partial`` directory, each deleting the other's; the second now waits and finds the
    entry made. Re-entrant within a process (``booting`` holds it around ``add``)."""
    global _held
    if _held:
        _held += 1
        try:
            yield
        finally:
            _held -= 1
        return
    paths.cache_dir().mkdir(parents=True, exist_ok=True)
    with (paths.cache_dir() / "kernels.lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        _held = 1
        try:
            yield
        finally:
            _held = 0


def parse_config(text: str) -> dict[str, str]:
    """``CONFIG_X=y|m|value`` lines of a kernel ``.config``: option (without the prefix)
    -> value. ``# CONFIG_X is not set`` and absent options are left out."""
    out = {}
    for line in text.splitlines():
        if line.startswith("CONFIG_") and "=" in line:
            key, _, value = line.partition("=")
            out[key.removeprefix("CONFIG_")] = value.strip().strip('"')
    return out


@dataclass(frozen=True)
class Kernel:
    """A kernel to boot: the image's own (``dir`` None) or a cached one."""

    name: str
    release: str
    source: dict[str, Any]
    options: dict[str, str]
    modules: dict[str, bool]  # out-of-tree pieces: dm-dust, zfs
    dir: Path | None = None

    @property
    def is_image_kernel(self) -> bool:
        return self.dir is None

    def boot_image(self, img: Image) -> Image:
        """``img`` booted with this kernel: its vmlinuz and initrd, the same root."""
        if self.dir is None:
            return img
        manifest = {**img.manifest, "kernel": self.release, "kernel_name": self.name}
        manifest["kernel_source"] = self.source
        return dataclasses.replace(
            img, kernel=self.dir / "vmlinuz", initrd=self.dir / "initrd.img", manifest=manifest
        )

    def config_value(self, option: str) -> str | None:
        """``CONFIG_<option>`` of this kernel: from what the lab keeps of it, else from
        its whole config (kept beside it). The image's kernel is Debian's, which builds
        every filesystem the lab knows; a mutant (or ``--fs-patch``) is that kernel with
        one module rebuilt, so it has what the image's has -- it keeps no config of its
        own, and reading none said JFS was missing from a JFS patch's kernel."""
        if option in self.options:
            return self.options[option]
        if self.dir is None or self.source.get("kind") == "mutant":
            return "m"
        config = self.dir / "config"
        return parse_config(config.read_text()).get(option) if config.exists() else None

    def require(self, option: str, why: str) -> None:
        """:raise InputError: this kernel lacks ``CONFIG_<option>`` (``why`` needs it)."""
        if self.options.get(option) in ("y", "m"):
            return
        raise InputError(
            f"kernel {self.name}: CONFIG_{option} is not set, and {why} needs it",
            hint="choose another kernel (scenario kernel list), or build one with it",
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "release": self.release,
            "source": self.source,
            "options": self.options,
            "modules": self.modules,
        }


def image_kernel(img: Image) -> Kernel:
    """The image's own kernel: built with everything the lab needs (images/recipe.toml)."""
    release = str(img.manifest.get("kernel") or "")
    return Kernel(
        name=release,
        release=release,
        source={"kind": "image", "image": img.hash},
        options={o: "m" for o in OPTIONS},
        modules={"dm-dust": True, "zfs": bool(img.manifest.get("zfs_version"))},
    )


def _open(d: Path) -> Kernel | None:
    if not all((d / f).is_file() for f in ("vmlinuz", "initrd.img")):
        return None
    try:
        m = json.loads((d / "manifest.json").read_text())
        return Kernel(m["name"], m["release"], m["source"], m["options"], m["modules"], d)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # half-written, or not ours: not a kernel to boot


def cached() -> list[Kernel]:
    d = kernels_dir()
    found = (_open(p) for p in sorted(d.iterdir()) if p.is_dir()) if d.is_dir() else ()
    return [k for k in found if k is not None]


def list_kernels(img: Image) -> list[Kernel]:
    """The image's kernel first, then every cached one."""
    return [image_kernel(img), *cached()]


def resolve(name: str, img: Image) -> Kernel:
    """The kernel called ``name`` (a release, or a release+mutant).

    :raise InputError: none such, with the closest names and how to add one.
    """
    known = list_kernels(img)
    for k in known:
        if name == k.name:
            return k
    names = [k.name for k in known]
    close = difflib.get_close_matches(name, names, n=2, cutoff=0.6)
    raise InputError(
        f"kernel {name!r}: not a kernel the lab has",
        hint=(f"did you mean {' or '.join(map(repr, close))}? " if close else "")
        + f"known: {', '.join(names)}; add one with: scenario kernel add deb:linux-image-{name}",
    )


def write_manifest(d: Path, k: Kernel) -> None:
    (d / "manifest.json").write_text(json.dumps(k.to_json(), indent=2, sort_keys=True) + "\n")


def describe(source: dict[str, Any]) -> str:
    """Where a kernel came from, in one line (``runs.tool_versions``, ``kernel list``)."""
    kind = source.get("kind")
    if kind == "deb":
        return f"deb {source['package']} {source['version']}"
    if kind == "tree":
        return f"tree {source['path']} config-sha256 {source['config_sha256'][:16]}"
    if kind == "build":
        what = source.get("git_head") or f"sha256 {source['source_sha256'][:16]}"
        return (
            f"build of {source['path']} ({source['version']}, {what}) on {source['base']} "
            f"config-sha256 {source['config_sha256'][:16]}"
        )
    if kind == "mutant":
        return f"mutant {source['patch']} of {source['module']} sha256 {source['sha256'][:16]}"
    return f"the image's ({source.get('image', '?')})"
