"""``scenario kernel build TREE``: a user's kernel source tree built with the lab's config
fragment (``kconfig.py``), then cached like ``tree:`` (``add.from_tree``).

The build is out of tree (``make O=``) in ``<cache>/kbuild/<tree>-<base>/``: the user's tree
is never written to, and a second build of the same tree is incremental. The base config
is Debian's (the image kernel's, from its headers package) or the tree's ``defconfig``;
the fragment is merged with the tree's own ``merge_config.sh``, then ``make olddefconfig``,
then every fragment option is checked (olddefconfig drops one whose dependency is off,
silently).

Cache key: the source's identity and the merged config. A git tree is named by its HEAD,
its diff against HEAD and its untracked files (so a fresh clone of one commit is the same
kernel); any other tree by its Makefile version and every file's path, size and mtime --
what make itself trusts to decide what to rebuild, in well under a second where hashing
the contents of a tree (1.2 GB) takes several. A file touched but unchanged then costs an
(incremental) rebuild, never a stale kernel. The key's first digits go into the release
(``LOCALVERSION``), so two configs of one tree are two kernels.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from harness import paths, proc
from harness.errors import CommandFailed, HarnessError, InputError, ToolMissing
from harness.image.build import load_recipe
from harness.kernel import kconfig
from harness.kernel.add import from_tree
from harness.kernel.entry import Step, timed
from harness.kernel.store import Kernel, cached

# Bumped when the build changes what it produces, so an entry built the old way is rebuilt.
BUILD = 1
HINT = "TREE is a Linux source tree (its top Makefile sets VERSION), e.g. ~/src/linux"


class Base(StrEnum):
    DEBIAN = "debian"  # the image kernel's config: the closest to the kernel the lab tests
    DEFCONFIG = "defconfig"  # the tree's x86_64 defconfig: a fraction of the build time


@dataclass(frozen=True)
class Built:
    kernel: Kernel
    built_now: bool
    log: Path


def kernel_version(tree: Path) -> str:
    """``6.1.192`` from the tree's top Makefile.

    :raise InputError: ``tree`` is not a kernel source tree.
    """
    makefile = tree / "Makefile"
    text = makefile.read_text(errors="replace") if makefile.is_file() else ""
    found = re.findall(r"^(VERSION|PATCHLEVEL|SUBLEVEL|EXTRAVERSION) *= *(\S*)", text, re.M)
    fields: dict[str, str] = dict(found)
    if "VERSION" not in fields or "PATCHLEVEL" not in fields:
        raise InputError(f"kernel build {tree}: no Makefile setting VERSION there", hint=HINT)
    v = f"{fields['VERSION']}.{fields['PATCHLEVEL']}"
    return (
        v
        + (f".{fields['SUBLEVEL']}" if fields.get("SUBLEVEL") else "")
        + fields.get("EXTRAVERSION", "")
    )


def require_clean(tree: Path) -> None:
    """:raise InputError: the tree was configured or built in place, which kbuild refuses
    for an ``O=`` build (its check, said before a make prints it mid-log)."""
    for f in (tree / ".config", tree / "include" / "config"):
        if f.exists():
            raise InputError(
                f"kernel build {tree}: the tree is configured in place ({f} exists)",
                hint="the lab builds out of tree: make mrproper in it first (which deletes "
                "its build), or add that build as it is: scenario kernel add tree:PATH",
            )


def identity(tree: Path) -> tuple[str, str | None]:
    """The source's digest, and its git HEAD when it is a git work tree."""
    if (tree / ".git").exists():
        git = ["git", "-c", "safe.directory=*", "-C", str(tree)]
        head = proc.run([*git, "rev-parse", "HEAD"], check=False)
        if head.ok:
            h = hashlib.sha256(head.stdout.encode())
            h.update(proc.run([*git, "diff", "HEAD", "--binary"]).stdout.encode())
            others = proc.run([*git, "ls-files", "--others", "--exclude-standard", "-z"]).stdout
            for name in sorted(filter(None, others.split("\0"))):
                h.update(name.encode() + b"\0" + (tree / name).read_bytes())
            return h.hexdigest(), head.stdout.strip()
    return walk_digest(tree), None


def walk_digest(tree: Path) -> str:
    h = hashlib.sha256(kernel_version(tree).encode() + b"\n")
    for top, dirs, files in os.walk(tree):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in sorted(files):
            p = Path(top, name)
            st = p.lstat()
            h.update(f"{p.relative_to(tree)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def cache_key(source_sha256: str, config_text: str) -> str:
    blob = json.dumps({"build": BUILD, "source": source_sha256, "config": config_text})
    return hashlib.sha256(blob.encode()).hexdigest()


def build_dir(tree: Path, base: Base) -> Path:
    where = hashlib.sha256(str(tree.resolve()).encode()).hexdigest()[:8]
    return paths.cache_dir() / "kbuild" / f"{tree.name}-{where}-{base}"


def debian_config() -> Path:
    """The image kernel's config, as its Debian headers package ships it (the same file
    as the image's ``/boot/config-<release>``; the image keeps no ``/boot``)."""
    release = load_recipe().kernel
    config = Path(f"/usr/src/linux-headers-{release}/.config")
    if not config.is_file():
        raise ToolMissing(str(config), f"linux-headers-{release}")
    return config


def _make(argv: list[str | Path], log: Path, what: str, cwd: Path | None = None) -> None:
    """One step of the build, its output appended to ``log``.

    :raise HarnessError: it failed (exit 3), with the log's tail and where the log is.
    """
    try:
        proc.run(argv, logfile=log, cwd=cwd)
    except CommandFailed as e:
        raise HarnessError(
            f"kernel build: {what} failed (exit status {e.returncode})",
            hint=f"full log: {log}",
            detail=e.stderr,
        ) from None


def configure(tree: Path, out: Path, base: Base, log: Path) -> str:
    """The merged ``out/.config``, every fragment option checked; its text.

    :raise InputError: an option of the fragment did not survive (named).
    """
    out.mkdir(parents=True, exist_ok=True)
    make: list[str | Path] = ["make", "-C", tree, f"O={out}"]
    if base is Base.DEFCONFIG:
        _make([*make, "defconfig"], log, "make defconfig")
    else:
        shutil.copy2(debian_config(), out / ".config")
    merge = tree / "scripts" / "kconfig" / "merge_config.sh"
    if not merge.is_file():
        raise InputError(f"kernel build {tree}: no {merge}", hint=HINT)
    only = out / "crashlab-build.config"
    only.write_text(kconfig.BUILD_ONLY)
    fragment = kconfig.fragment_path()
    # merge_config.sh writes its temporary files into its working directory: ours, so the
    # user's tree stays untouched.
    argv: list[str | Path] = ["sh", merge, "-m", "-O", out, out / ".config", only, fragment]
    _make(argv, log, "merge_config.sh", cwd=out)
    _make([*make, "olddefconfig"], log, "make olddefconfig")
    kconfig.require_all(fragment, out / ".config")
    return (out / ".config").read_text()


def find_cached(key: str) -> Kernel | None:
    return next((k for k in cached() if k.source.get("key") == key), None)


def build(tree: Path, base: Base, jobs: int, on_step: Step = lambda what, s: None) -> Built:
    """Build ``tree`` with the fragment over ``base`` and cache it; a no-op returning the
    cached kernel when the source and the merged config are the ones it was built from.

    :raise InputError: not a kernel tree, configured in place, or a fragment option lost.
    :raise HarnessError: a build step failed (the log's tail and path).
    """
    tree = tree.expanduser().resolve()
    version = kernel_version(tree)
    require_clean(tree)
    out = build_dir(tree, base)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "build.log"
    log.write_text("")
    source_sha, head = timed(on_step, "source identity", lambda: identity(tree))
    config = timed(
        on_step,
        f"config: {base} + {kconfig.fragment_path().name}, olddefconfig",
        lambda: configure(tree, out, base, log),
    )
    key = cache_key(source_sha, config)
    if (k := find_cached(key)) is not None:
        on_step("cached (same source and config)", 0.0)
        return Built(k, False, log)
    make: list[str | Path] = ["make", "-C", tree, f"O={out}", f"LOCALVERSION=-crashlab-{key[:8]}"]
    timed(
        on_step,
        f"make -j{jobs} bzImage modules",
        lambda: _make([*make, f"-j{jobs}", "bzImage", "modules"], log, "make bzImage modules"),
    )
    # Not into O= itself: its lib/ holds the objects of the source's lib/ (libcrc32c.ko).
    mods = out / "crashlab-modules"
    shutil.rmtree(mods, ignore_errors=True)  # another key's release
    timed(
        on_step,
        "make modules_install",
        lambda: _make(
            [*make, "modules_install", f"INSTALL_MOD_PATH={mods}", "INSTALL_MOD_STRIP=1"],
            log,
            "make modules_install",
        ),
    )
    source: dict[str, Any] = {
        "kind": "build",
        "path": str(tree),
        "version": version,
        "git_head": head,
        "source_sha256": source_sha,
        "config_sha256": hashlib.sha256(config.encode()).hexdigest(),
        "base": str(base),
        "key": key,
        "build": BUILD,
    }
    return Built(from_tree(out, on_step, source, modules=mods), True, log)
