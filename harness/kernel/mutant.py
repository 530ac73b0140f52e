"""``mutant:NAME``: the image's kernel with one filesystem module rebuilt from Debian's
``linux-source-6.1`` with ``mutants/NAME.patch`` applied -- a known class of
crash-consistency bug put back, to show the lab catches bugs in filesystem code.

The module is built out of tree against the image kernel's headers (the same source
version: 6.1.192 is 6.1.0-56), cached by the patch's hash. The guest boots the image's
vmlinuz with an initrd holding the mutant: for ext4 and jbd2 the initrd loads it and the
root disk itself is mounted by the mutant (the root is a disposable snapshot, and the
alternative, a root that is not ext4, would mean a second root image to build and keep);
for xfs and btrfs it replaces the stock module in the root's overlay, where modprobe
finds it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from harness import paths, proc
from harness.errors import InputError, ToolMissing
from harness.image.build import Image
from harness.kernel import initrd
from harness.kernel.entry import Step, fresh, install, timed
from harness.kernel.store import Kernel, image_kernel, kernels_dir, resolve

SOURCE_TAR = Path("/usr/src/linux-source-6.1.tar.xz")  # linux-source-6.1 (host deps)
TOP = "linux-source-6.1"
# How a mutant is built, beside the patch's hash in the cache key: bumped when the build
# changes what it produces (2: the module is stripped of debug info), so an entry built
# the old way is rebuilt rather than kept.
BUILD = 2


def mutants_dir() -> Path:
    return paths.REPO / "mutants"


def names() -> list[str]:
    return sorted(p.stem for p in mutants_dir().glob("*.patch"))


def patch_file(name: str) -> Path:
    p = mutants_dir() / f"{name}.patch"
    if not p.is_file():
        raise InputError(
            f"kernel source mutant:{name}: no {p}", hint="mutants: " + ", ".join(names())
        )
    return p


PATCH_HINT = (
    "a unified diff (diff -u, git diff) of one filesystem module's folder (fs/ext4, "
    "fs/jbd2, fs/xfs, fs/btrfs, fs/jfs, ...) in linux-source-6.1, the image kernel's "
    "source; mutants/*.patch are examples"
)


def check_patch(path: Path) -> Path:
    """``--fs-patch FILE``: a patch of one filesystem module the lab can rebuild.

    :raise InputError: no such file, no hunks in it, or not one module's folder.
    """
    if not path.is_file():
        raise InputError(f"--fs-patch {path}: no such file", hint=PATCH_HINT)
    lines = path.read_text(errors="replace").splitlines()
    if not any(line.startswith("@@ ") for line in lines):
        raise InputError(f"--fs-patch {path}: not a patch (no hunks)", hint=PATCH_HINT)
    if not module_dir(path).startswith("fs/"):
        raise InputError(
            f"--fs-patch {path}: edits {module_dir(path)}, not a filesystem", hint=PATCH_HINT
        )
    return path


def module_dir(patch: Path) -> str:
    """The one source folder the patch edits (``fs/ext4``): the module it rebuilds."""
    dirs = {
        str(Path(line.split()[1]).parent).removeprefix("b/")
        for line in patch.read_text().splitlines()
        if line.startswith("+++ ")
    }
    if len(dirs) != 1:
        raise InputError(f"{patch}: edits {sorted(dirs)}; a mutant patches one module's folder")
    return dirs.pop()


def add(name: str, img: Image, on_step: Step, patch: Path | None = None) -> Kernel:
    """The image's kernel with the module ``patch`` edits rebuilt; ``patch`` defaults to
    ``mutants/<name>.patch`` (a user's patch: ``scenario run --fs-patch FILE``)."""
    patch = patch or patch_file(name)
    digest = hashlib.sha256(patch.read_bytes()).hexdigest()
    base = image_kernel(img)
    kname = f"{base.release}+{name}"
    cached = kernels_dir() / kname / "manifest.json"
    built = json.loads(cached.read_text())["source"] if cached.is_file() else {}
    if (built.get("sha256"), built.get("build")) == (digest, BUILD):
        on_step("cached (same patch)", 0.0)
        return resolve(kname, img)
    headers = Path(f"/usr/src/linux-headers-{base.release}")
    for need, pkg in ((SOURCE_TAR, "linux-source-6.1"), (headers, f"linux-headers-{base.release}")):
        if not need.exists():
            raise ToolMissing(str(need), pkg)
    work = fresh(kname)
    src = work / "src"
    src.mkdir()
    mdir = module_dir(patch)
    ko = _build_module(work, patch, mdir, headers, on_step)
    _check_vermagic(ko, base.release)
    _initrd(work, img, ko, f"{base.release}/kernel/{mdir}", on_step)
    shutil.copy2(img.kernel, work / "vmlinuz")
    k = Kernel(
        name=kname,
        release=base.release,
        source={
            "kind": "mutant",
            "patch": name,
            "sha256": digest,
            "module": mdir,
            "base": base.release,
            "build": BUILD,
        },
        options=base.options,
        modules=base.modules,
    )
    return install(work, k)


def _build_module(work: Path, patch: Path, mdir: str, headers: Path, on_step: Step) -> Path:
    """The module's source extracted under ``work/src``, ``patch`` applied, built out of
    tree against ``headers``; its .ko."""
    src = work / "src"
    timed(
        on_step,
        f"extract {mdir}",
        lambda: proc.run(["tar", "-xJf", SOURCE_TAR, "-C", src, f"{TOP}/{mdir}"]),
    )
    r = proc.run(
        ["patch", "-p1", "--forward", "--batch", "-d", src / TOP, "-i", patch.resolve()],
        check=False,
    )
    if r.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise InputError(
            f"{patch}: does not apply to {TOP}/{mdir}: {(r.stdout + r.stderr).strip()[-600:]}",
            hint="regenerate it against linux-source-6.1 (mutants/README.md)",
        )
    mod = src / TOP / mdir
    # A module's Makefile may add -I $(srctree)/$(src) (xfs: its trace header, libxfs/);
    # out of tree, srctree is the headers, so the source's own folders come in here.
    includes = " ".join(f"-I{d}" for d in (mod, *sorted(p for p in mod.iterdir() if p.is_dir())))
    timed(
        on_step,
        f"make {mdir} (out of tree, -j2)",
        lambda: proc.run(
            ["make", "-C", headers, f"M={mod}", f"KCFLAGS={includes}", "-j2", "modules"],
            timeout=3600,
            logfile=work / "build.log",
        ),
    )
    return mod / f"{Path(mdir).name}.ko"


def _initrd(work: Path, img: Image, ko: Path, place: str, on_step: Step) -> None:
    """``work/initrd.img``: the image's own (its busybox and early modules), ``ko``
    stripped and in place of the stock module, and under ``lib/modules/<place>``."""
    # The headers' config builds with debug info: ext4.ko is 19 MB, the stock one 2 MB. It
    # sits in the initrd twice (loaded early, and placed for modprobe), so unstripped the
    # initrd was 41 MB, every boot unpacks it, and the guest keeps it in RAM. Debian ships
    # its modules stripped the same way (kbuild's INSTALL_MOD_STRIP=1).
    proc.run(["strip", "--strip-debug", ko])
    stage = work / "base"
    stage.mkdir()
    proc.run(["cpio", "-idm", "--quiet", "-F", img.initrd.resolve()], cwd=stage)
    early = [stage / "lib" / "modules" / n for n in (stage / "modules.order").read_text().split()]
    early = [ko if p.name == ko.name else p for p in early]
    tree = work / "tree"
    into = tree / "lib" / "modules" / place
    into.mkdir(parents=True)
    shutil.copy2(ko, into / ko.name)
    timed(
        on_step,
        "initrd",
        lambda: initrd.build(work / "initrd.img", early, tree, whole=False, work=work),
    )


def _check_vermagic(ko: Path, release: str) -> None:
    magic = proc.run(["modinfo", "-F", "vermagic", ko]).stdout.strip()
    if magic.split()[:1] != [release]:
        raise InputError(
            f"{ko.name}: built for {magic.split()[0] if magic else '?'}, "
            f"the kernel is {release} (vermagic {magic!r})",
            hint=f"build against /usr/src/linux-headers-{release}",
        )
