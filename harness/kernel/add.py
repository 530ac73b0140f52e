"""``scenario kernel add SPEC``: a kernel into the cache, from one of three sources.

- ``deb:PACKAGE``: a Debian kernel package (``linux-image-6.12.95+deb12-amd64``,
  ``linux-image-6.1.0-47-amd64``), fetched with ``apt-get download`` and unpacked with
  ``dpkg-deb -x`` -- never installed on the host.
- ``tree:PATH``: a kernel a user built: ``PATH/arch/x86/boot/bzImage``, ``PATH/.config``,
  and ``make modules_install INSTALL_MOD_PATH=PATH`` (``PATH/lib/modules/<release>``).
- ``mutant:NAME``: the image's kernel with one module rebuilt from ``mutants/NAME.patch``
  (``mutant.py``); ``patch:FILE``: the same from a user's patch of ext4, jbd2, xfs or
  btrfs (``scenario run --fs-patch FILE``).

An entry is built in ``<name>.partial`` and renamed into place only when complete.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path
from typing import Any

from harness import proc
from harness.errors import InputError
from harness.image.build import Image
from harness.kernel import initrd, mutant, store
from harness.kernel.entry import Step, fresh, install, timed
from harness.kernel.store import OPTIONS, Kernel, parse_config

HINT = (
    "deb:linux-image-6.12.95+deb12-amd64 (apt-cache search --names-only '^linux-image' "
    "lists them), tree:~/src/linux, mutant:NAME (mutants/) or patch:FILE"
)


def add(spec: str, img: Image, on_step: Step = lambda what, s: None) -> Kernel:
    """Fetch or build the kernel ``spec`` names, cache it and return it."""
    kind, _, arg = spec.partition(":")
    if not arg:
        raise InputError(f"kernel source {spec!r}: expected KIND:VALUE", hint=HINT)
    with store.adding():
        return _add(kind, arg, spec, img, on_step)


def _add(kind: str, arg: str, spec: str, img: Image, on_step: Step) -> Kernel:
    if kind == "deb":
        return _deb(arg, on_step)
    if kind == "tree":
        return from_tree(Path(arg).expanduser(), on_step)
    if kind == "mutant":
        return mutant.add(arg, img, on_step)
    if kind == "patch":
        return _patch(Path(arg).expanduser(), img, on_step)
    raise InputError(f"kernel source {spec!r}: unknown kind {kind!r}", hint=HINT)


def _patch(path: Path, img: Image, on_step: Step) -> Kernel:
    """A filesystem under test from a user's patch, built like a mutant: named by the
    patch's stem and hash, so two versions of one patch are two kernels."""
    if not path.is_file():
        raise InputError(f"kernel source patch:{path}: no such file", hint=HINT)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return mutant.add(f"{path.stem}-{digest}", img, on_step, patch=path)


# Debian policy's package name. apt-get takes a name it does not know as a regular
# expression: `linux-image-6.1.0-4` (a typo, or `--kernel 6.1.0-4` fetched on first use)
# matches fifteen packages, their -dbg ones near a gigabyte each.
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+")


def _deb(package: str, on_step: Step) -> Kernel:
    if not _PACKAGE.fullmatch(package):
        raise InputError(
            f"kernel source deb:{package}: not a Debian package name",
            hint="one package, no pattern: " + HINT,
        )
    _require_one_package(package)
    work = fresh(package)
    dl = work / "dl"
    dl.mkdir()
    r = timed(
        on_step,
        "apt-get download",
        lambda: proc.run(["apt-get", "download", package], cwd=dl, check=False, timeout=1800),
    )
    debs = sorted(dl.glob("*.deb"))
    if r.returncode != 0 or len(debs) != 1:
        why = (r.stderr.strip().splitlines() or ["no package downloaded"])[-1]
        shutil.rmtree(work, ignore_errors=True)
        raise InputError(f"kernel source deb:{package}: apt-get download: {why}", hint=HINT)
    version = proc.run(["dpkg-deb", "-f", debs[0], "Version"]).stdout.strip()
    root = work / "root"
    timed(on_step, "dpkg-deb -x", lambda: proc.run(["dpkg-deb", "-x", debs[0], root]))
    releases = [p.name for p in (root / "lib" / "modules").glob("*") if p.is_dir()]
    if len(releases) != 1:
        shutil.rmtree(work, ignore_errors=True)
        raise InputError(
            f"kernel source deb:{package}: not a kernel image package "
            f"(modules for {releases or 'no release'})",
            hint=HINT,
        )
    rel = releases[0]
    source = {"kind": "deb", "package": package, "version": version}
    return _finish(
        work,
        rel,
        root,
        root / "boot" / f"vmlinuz-{rel}",
        root / "boot" / f"config-{rel}",
        source,
        on_step,
    )


def _require_one_package(package: str) -> None:
    """What ``apt-get download`` would fetch, asked first (``--print-uris``, no download):
    ``package`` itself and nothing else.

    :raise InputError: apt does not know it (with apt's words), or knows it only as a
        pattern of other packages (named).
    """
    r = proc.run(["apt-get", "download", "--print-uris", package], check=False, timeout=120)
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["apt-get failed"])[-1]
        raise InputError(f"kernel source deb:{package}: apt-get download: {why}", hint=HINT)
    # One line per file: 'URI' FILENAME SIZE HASH, the file named PACKAGE_VERSION_ARCH.deb.
    got = sorted({line.split()[1].split("_")[0] for line in r.stdout.splitlines() if line})
    if got != [package]:
        raise InputError(
            f"kernel source deb:{package}: no such package (apt takes it as a pattern "
            f"of {len(got)}: {', '.join(got[:4])}" + (", ..." if len(got) > 4 else "") + ")",
            hint=HINT,
        )


def from_tree(
    path: Path,
    on_step: Step,
    source: dict[str, Any] | None = None,
    *,
    modules: Path | None = None,
) -> Kernel:
    """A built tree (or a build's ``O=`` folder) into the cache; its modules under
    ``modules/lib/modules/<release>`` (``make modules_install INSTALL_MOD_PATH=``;
    default: ``path``). ``source`` says where it came from (default: the tree and the
    hash of its config)."""
    modules = modules or path
    where = f"kernel source tree:{path}"
    bz, config = path / "arch" / "x86" / "boot" / "bzImage", path / ".config"
    relfile = path / "include" / "config" / "kernel.release"
    for f, what in (
        (bz, "no bzImage (make bzImage)"),
        (config, "no .config"),
        (relfile, "no include/config/kernel.release (build the tree first)"),
    ):
        if not f.is_file():
            raise InputError(f"{where}: {what}: {f}", hint="build it: make -j$(nproc)")
    rel = relfile.read_text().strip()
    if not (modules / "lib" / "modules" / rel).is_dir():
        raise InputError(
            f"{where}: no modules for {rel} under {modules / 'lib' / 'modules'}",
            hint=f"make modules_install INSTALL_MOD_PATH={modules}",
        )
    if source is None:
        digest = hashlib.sha256(config.read_bytes()).hexdigest()
        source = {"kind": "tree", "path": str(path), "config_sha256": digest}
    with store.adding():
        return _finish(fresh(rel), rel, modules, bz, config, source, on_step)


def _finish(
    work: Path,
    rel: str,
    root: Path,
    vmlinuz: Path,
    config: Path,
    source: dict[str, Any],
    on_step: Step,
) -> Kernel:
    """From a root holding ``lib/modules/<rel>``: the initrd, the manifest, into place."""
    if not vmlinuz.is_file() or not config.is_file():
        shutil.rmtree(work, ignore_errors=True)
        raise InputError(f"kernel {rel}: no {vmlinuz.name} or {config.name} in the source")
    mods = root / "lib" / "modules" / rel
    tree = work / "tree"
    dest = tree / "lib" / "modules" / rel

    def stage() -> None:
        # Made first: a tree whose drivers are all built in has none of TREE_PARTS.
        dest.mkdir(parents=True)
        for part in initrd.TREE_PARTS:
            if (mods / part).is_dir():
                shutil.copytree(mods / part, dest / part, symlinks=True)
        for f in mods.glob("modules.*"):
            shutil.copy2(f, dest / f.name)

    timed(on_step, "module tree (fs, dm, virtio)", stage)
    timed(on_step, "xz the plain modules", lambda: initrd.compress(dest))
    timed(on_step, "depmod", lambda: proc.run(["depmod", "-b", tree, rel]))
    early = initrd.early_modules(tree, rel)
    timed(
        on_step,
        "initrd",
        lambda: initrd.build(work / "initrd.img", early, tree, whole=True, work=work),
    )
    shutil.copy2(vmlinuz, work / "vmlinuz")
    shutil.copy2(config, work / "config")
    config_all = parse_config(config.read_text())
    options = {o: config_all[o] for o in OPTIONS if o in config_all}
    k = Kernel(
        name=rel,
        release=rel,
        source=source,
        options=options,
        modules={
            "dm-dust": config_all.get("DM_DUST") in ("y", "m"),
            "zfs": any(dest.rglob("zfs.ko*")),
        },
    )
    return install(work, k)
