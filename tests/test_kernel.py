"""Kernels under test (harness/kernel): the cache's records, bad input, what a scenario
needs of its kernel, the mutants, and the mutant campaign's detection table. The real
downloads, builds and boots are in tests/test_kernel_vm.py."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import lzma
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import paths, proc, tools
from harness.config import scenario
from harness.errors import InputError, NotRun
from harness.experiments import lifecycle, registry
from harness.image.build import Image, load_recipe
from harness.kernel import add, initrd, mutant
from harness.kernel.boot import booting
from harness.kernel.store import (
    Kernel,
    cached,
    image_kernel,
    parse_config,
    resolve,
    write_manifest,
)
from harness.outcome import Account, Outcome
from harness.report import mutants as detection
from harness.store.model import ItemOutcome

DATA = Path(__file__).parent / "data" / "kernel"


def test_the_config_says_what_the_kernel_has() -> None:
    cfg = parse_config((DATA / "config-6.12.95-excerpt").read_text())
    assert cfg["DM_LOG_WRITES"] == "m" and cfg["VIRTIO_PCI"] == "y"
    assert "DM_DUST" not in cfg  # "# CONFIG_DM_DUST is not set"
    assert cfg["CC_VERSION_TEXT"].startswith("x86_64-linux-gnu-gcc-12")


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("linux-image-6.12", "expected KIND:VALUE"),
        ("nope:x", "unknown kind 'nope'"),
        ("mutant:no-such-mutant", "no-such-mutant"),
    ],
)
def test_a_bad_kernel_source_names_itself(spec: str, words: str) -> None:
    with pytest.raises(InputError) as e:
        add.add(spec, SimpleNamespace())  # type: ignore[arg-type]
    assert words in e.value.message and e.value.hint


def test_a_tree_without_its_build_says_which_file(tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        add.add(f"tree:{tmp_path}", SimpleNamespace())  # type: ignore[arg-type]
    assert "bzImage" in e.value.message and str(tmp_path) in e.value.message


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CRASHLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _fake(cache: Path, name: str, options: dict[str, str], modules: dict[str, bool]) -> Kernel:
    """A cached entry as add() leaves one (files that are never booted here)."""
    d = cache / "kernels" / name
    d.mkdir(parents=True)
    (d / "vmlinuz").write_bytes(b"")
    (d / "initrd.img").write_bytes(b"")
    k = Kernel(
        name,
        name,
        {"kind": "deb", "package": f"linux-image-{name}", "version": "1"},
        options,
        modules,
        d,
    )
    write_manifest(d, k)
    return k


def test_a_half_written_entry_is_not_a_kernel(cache: Path) -> None:
    _fake(cache, "6.12.1", {"DM_LOG_WRITES": "m"}, {})
    broken = cache / "kernels" / "6.12.2"
    broken.mkdir()
    (broken / "vmlinuz").write_bytes(b"")
    (broken / "initrd.img").write_bytes(b"")
    (broken / "manifest.json").write_text(json.dumps({"name": "x"}))
    assert [k.name for k in cached()] == ["6.12.1"]


def test_what_a_scenario_needs_of_its_kernel(cache: Path) -> None:
    """A missing CONFIG option is bad input; a missing out-of-tree module is not run; both
    before any run is recorded (no image, no store touched)."""
    _fake(cache, "6.99.0-nolog", {"DM_FLAKEY": "m"}, {"dm-dust": False, "zfs": False})
    db = cache / "lab.sqlite"
    sc = scenario.load("ext4-ordered-fsync", ["kernel=6.99.0-nolog"])
    with pytest.raises(InputError) as e:
        lifecycle.execute(sc, db=db)
    assert "CONFIG_DM_LOG_WRITES" in e.value.message and "6.99.0-nolog" in e.value.message
    with pytest.raises(NotRun) as n:
        lifecycle.execute(scenario.load("dust-scrub", ["kernel=6.99.0-nolog"]), db=db)
    assert "dm-dust" in n.value.message and n.value.exit_status == 0
    assert not db.exists()


def test_an_unset_kernel_is_not_a_stored_parameter() -> None:
    """Runs stored before kernels were chosen resume: no "kernel": null in their params."""
    assert "kernel" not in scenario.load("ext4-ordered-fsync").resolved()
    chosen = scenario.load("ext4-ordered-fsync", ["kernel=+ext4-fsync-no-commit"]).resolved()
    assert chosen["kernel"] == "+ext4-fsync-no-commit"


def test_booting_nothing_changes_nothing() -> None:
    with booting(None) as k:
        assert k is None


@pytest.mark.skipif(not mutant.SOURCE_TAR.is_file(), reason="linux-source-6.1 not installed")
def test_every_mutant_applies_to_the_image_kernels_source(tmp_path: Path) -> None:
    """Each patch edits one module's folder and applies to linux-source-6.1 as shipped."""
    names = mutant.names()
    assert len(names) >= 8
    dirs = {n: mutant.module_dir(mutant.patch_file(n)) for n in names}
    assert set(dirs.values()) >= {"fs/ext4", "fs/jbd2", "fs/xfs", "fs/btrfs"}
    folders = sorted({f"{mutant.TOP}/{d}" for d in dirs.values()})
    subprocess.run(["tar", "-xJf", mutant.SOURCE_TAR, "-C", tmp_path, *folders], check=True)
    for n in names:
        patch = mutant.patch_file(n)
        r = subprocess.run(
            ["patch", "-p1", "--dry-run", "--batch", "-d", tmp_path / mutant.TOP, "-i", patch],
            capture_output=True,
            text=True,
            check=False,
        )
        assert r.returncode == 0, (n, r.stdout, r.stderr)
        assert patch.read_text().startswith("# "), f"{n}: say the bug class it re-creates"


def _account(findings: int) -> Account:
    from harness.outcome import Tallied, tally

    items = [Tallied(f"s{i}", Outcome.DATA_LOSS, False) for i in range(findings)]
    return tally([*items, Tallied("ok", Outcome.CONSISTENT, False)], None)


def test_the_detection_table_lists_gaps_and_false_alarms() -> None:
    def run(n: int) -> tuple[str, Account, list[ItemOutcome]]:
        items = [ItemOutcome(f"s{i}", Outcome.DATA_LOSS, {}, "verdicts") for i in range(n)]
        return (f"run{n}", _account(n), items)

    cells = [
        detection.cell("ext4-ordered-fsync", ["expect=clean"], "done", None, run(0)),
        detection.cell(
            "ext4-ordered-fsync", ["kernel=+ext4-fsync-no-commit"], "done", None, run(3)
        ),
        detection.cell("ext4-ordered-fsync", ["kernel=+ext4-fsync-no-flush"], "done", None, run(0)),
        detection.cell("xfs-fsync", ["kernel=+xfs-fsync-no-log-force"], "done", "not run: x", None),
        detection.cell("btrfs-fsync", [], "done", None, run(1)),
        detection.cell("xfs-fsync", ["kernel=6.12.95+deb12-amd64"], "done", None, run(0)),
    ]
    d = detection.detection(cells)
    assert [c.result for c in d.cells] == ["clean", "caught", "missed", "not run", "FOUND", "clean"]
    assert d.cells[1].states == ("s0", "s1", "s2")
    assert d.cells[5].mutant is None  # a release with a '+' is not a mutant
    assert d.gaps == ["ext4-fsync-no-flush", "xfs-fsync-no-log-force"]
    assert d.rate == pytest.approx(1 / 3)
    assert [c.scenario for c in d.false_alarms] == ["btrfs-fsync"]
    assert "1 of 3 mutants caught" in detection.summary_line(d)
    # A build the harness failed is not the mutant escaping: not measured, not a gap.
    broken = detection.cell(
        "xfs-fsync", ["kernel=+xfs-fsync-no-log-force"], "quarantined", "x", None
    )
    d2 = detection.detection([*cells[:3], broken])
    assert broken.result == "failed" and d2.gaps == ["ext4-fsync-no-flush"]
    assert paths.REPO.joinpath("campaigns", "mutants.toml").is_file()


@pytest.mark.skipif(not mutant.SOURCE_TAR.is_file(), reason="linux-source-6.1 not installed")
def test_a_patch_that_does_not_apply_names_its_hunk(cache: Path, tmp_path: Path) -> None:
    bad = tmp_path / "mine.patch"
    bad.write_text(
        "--- a/fs/ext4/fsync.c\n+++ b/fs/ext4/fsync.c\n@@ -1,3 +1,3 @@\n"
        " no such line\n-nor this one\n+but this\n no such line either\n"
    )
    release = load_recipe().kernel
    img = SimpleNamespace(manifest={"kernel": release}, hash="img")
    if not Path(f"/usr/src/linux-headers-{release}").is_dir():
        pytest.skip("the image kernel's headers are not installed")
    with pytest.raises(InputError) as e:
        add.add(f"patch:{bad}", img)  # type: ignore[arg-type]
    assert str(bad) in e.value.message and "does not apply" in e.value.message
    assert "FAILED" in e.value.message or "hunk" in e.value.message.lower()
    assert not list((cache / "kernels").glob("*.partial"))


@pytest.mark.parametrize("name", ["mutants.toml", "kernels.toml", "controls.toml"])
def test_the_kernel_campaigns_load_and_name_real_scenarios(name: str) -> None:
    from harness.config import campaign

    camp = campaign.load(paths.REPO / "campaigns" / name)
    for el in camp.elements:
        sc = scenario.load(el.scenario, el.overrides)
        kernel = sc.kernel or ""
        if kernel.startswith("+"):
            assert kernel[1:] in mutant.names(), el  # every mutant named exists
    mutated = {detection.mutant_of(el.overrides) for el in camp.elements} - {None}
    if name == "mutants.toml":
        assert mutated == set(mutant.names())  # each mutant has a scenario meant to catch it


def test_a_campaign_element_its_kernel_cannot_run_is_done_not_failed(tmp_path: Path) -> None:
    """not run: neither a failure (no retry, no quarantine) nor a finding; the reason kept."""
    from harness.campaign.runner import Engine
    from harness.cli import campaign as cli_campaign
    from harness.config import campaign

    f = tmp_path / "k.toml"
    f.write_text('[[run]]\nscenario = "dust-scrub"\nset = ["kernel=6.99.0-nodust"]\n')

    def runner(el: object, ctx: object) -> str:
        raise NotRun("dust-scrub on kernel 6.99.0-nodust: needs dm-dust, which is not built")

    db = tmp_path / "lab.sqlite"
    report = Engine(campaign.load(f), db, runner=runner).run()
    assert cli_campaign.summarize(report) == 0
    (row,) = report.rows
    assert str(row.status) == "done" and row.run_id is None and row.failures == 0
    assert row.last_error is not None and row.last_error.startswith("not run: dust-scrub")


# -- kernel add's sources, beyond bad specs ---------------------------------------------------


@pytest.mark.parametrize(
    ("package", "words"),
    [
        ("linux-image-6.1.*", "not a Debian package name"),
        ("Linux-Image-6.12", "not a Debian package name"),
        ("linux-image-6.1.0-4", "as a pattern of"),  # asked of apt (--print-uris)
    ],
)
def test_an_apt_pattern_is_refused_before_anything_is_fetched(
    package: str, words: str, cache: Path
) -> None:
    """apt-get takes an unknown name as a pattern: linux-image-6.1.0-4 matches fifteen
    packages (their -dbg ones near a gigabyte each). Refused, nothing downloaded."""
    if "pattern" in words and not tools.available("apt-get"):
        pytest.skip("needs apt-get (a Debian host)")
    with pytest.raises(InputError) as e:
        add.add(f"deb:{package}", SimpleNamespace())  # type: ignore[arg-type]
    assert package in e.value.message and words in e.value.message and e.value.hint
    assert not (cache / "kernels").exists()


@pytest.mark.skipif(not tools.available("apt-get"), reason="needs apt-get (a Debian host)")
def test_an_unknown_package_carries_apts_words(cache: Path) -> None:
    with pytest.raises(InputError) as e:
        add.add("deb:linux-image-0.0.0-0-nonesuch", SimpleNamespace())  # type: ignore[arg-type]
    assert "apt-get download: E: " in e.value.message
    assert "'linux-image-0.0.0-0-nonesuch'" in e.value.message


@pytest.mark.skipif(
    not all(tools.available(t) for t in ("busybox", "cpio", "depmod", "modprobe")),
    reason="needs busybox-static, cpio and kmod",
)
def test_a_tree_with_its_drivers_built_in(tmp_path: Path, cache: Path) -> None:
    """A user's tree (make; make modules_install INSTALL_MOD_PATH=PATH) whose root-disk
    drivers are built in: cached under its release, nothing to load early, and the
    user's tree only read."""
    t, rel = tmp_path / "linux", "6.13.0-lab"
    (t / "arch/x86/boot").mkdir(parents=True)
    (t / "arch/x86/boot/bzImage").write_bytes(b"bz")
    (t / ".config").write_text(
        "CONFIG_VIRTIO_PCI=y\nCONFIG_VIRTIO_BLK=y\nCONFIG_EXT4_FS=y\nCONFIG_DM_FLAKEY=m\n"
    )
    (t / "include/config").mkdir(parents=True)
    (t / "include/config/kernel.release").write_text(rel + "\n")
    mods = t / "lib/modules" / rel
    mods.mkdir(parents=True)
    builtin = ("drivers/virtio/virtio_pci", "drivers/block/virtio_blk", "fs/ext4/ext4")
    (mods / "modules.builtin").write_text("".join(f"kernel/{m}.ko\n" for m in builtin))
    k = add.add(f"tree:{t}", SimpleNamespace())  # type: ignore[arg-type]
    assert (k.name, k.release, k.dir) == (rel, rel, cache / "kernels" / rel)
    assert k.source == {
        "kind": "tree",
        "path": str(t),
        "config_sha256": hashlib.sha256((t / ".config").read_bytes()).hexdigest(),
    }
    assert k.options == {"VIRTIO_PCI": "y", "VIRTIO_BLK": "y", "EXT4_FS": "y", "DM_FLAKEY": "m"}
    assert k.modules == {"dm-dust": False, "zfs": False}
    assert (cache / "kernels" / rel / "vmlinuz").read_bytes() == b"bz"
    listing = proc.run(["cpio", "-t", "--quiet", "-F", cache / "kernels" / rel / "initrd.img"])
    assert {"init", "bin/busybox", f"tree/lib/modules/{rel}/modules.dep"} <= set(
        listing.stdout.split()
    )
    assert sorted(p.name for p in mods.iterdir()) == ["modules.builtin"]


@pytest.mark.parametrize("suffix", ["", ".xz", ".gz", ".zst"])
def test_early_modules_go_in_the_initrd_uncompressed(suffix: str, tmp_path: Path) -> None:
    """busybox's insmod reads plain .ko only, whatever CONFIG_MODULE_COMPRESS_* made."""
    if suffix == ".zst" and not tools.available("zstd"):
        pytest.skip("needs zstd")
    body = b"\x7fELF a module" * 100
    ko = tmp_path / f"virtio_blk.ko{suffix}"
    (tmp_path / "raw").write_bytes(body)
    if suffix == ".zst":
        proc.run(["zstd", "-q", tmp_path / "raw", "-o", ko])
    else:
        pack: dict[str, Callable[[bytes], bytes]] = {
            "": bytes,
            ".xz": lzma.compress,
            ".gz": gzip.compress,
        }
        ko.write_bytes(pack[suffix](body))
    out = tmp_path / "out"
    out.mkdir()
    dest = initrd.plain(ko, out)
    assert dest == out / "virtio_blk.ko" and dest.read_bytes() == body


@pytest.mark.skipif(
    not all(tools.available(t) for t in ("gcc", "objcopy", "modinfo")),
    reason="needs gcc, objcopy and modinfo to make a module-like object",
)
def test_a_module_built_for_another_kernel_names_both(tmp_path: Path) -> None:
    (tmp_path / "e.c").write_text("")
    (tmp_path / "modinfo").write_bytes(b"vermagic=6.12.95+deb12-amd64 SMP mod_unload \0")
    proc.run(["gcc", "-c", tmp_path / "e.c", "-o", tmp_path / "e.o"])
    ko = tmp_path / "ext4.ko"
    proc.run(["objcopy", "--add-section", f".modinfo={tmp_path / 'modinfo'}", tmp_path / "e.o", ko])
    mutant._check_vermagic(ko, "6.12.95+deb12-amd64")
    with pytest.raises(InputError) as e:
        mutant._check_vermagic(ko, "6.1.0-56-amd64")
    assert "6.12.95+deb12-amd64" in e.value.message and "6.1.0-56-amd64" in e.value.message


def test_a_kernel_boots_the_same_root_image(cache: Path, tmp_path: Path) -> None:
    """boot_image swaps vmlinuz and initrd and nothing else: the root image, its hash (the
    accelerator probe's key) and its tools stay; the manifest says which kernel."""
    img = Image(
        tmp_path,
        tmp_path / "rootfs.qcow2",
        tmp_path / "vmlinuz",
        tmp_path / "initrd.img",
        {"recipe_hash": "0123456789abcdef", "kernel": "6.1.0-56-amd64"},
    )
    k = _fake(cache, "6.12.95+deb12-amd64", {"DM_LOG_WRITES": "m"}, {})
    booted = k.boot_image(img)
    assert (booted.rootfs, booted.hash) == (img.rootfs, img.hash)
    assert (booted.kernel, booted.initrd) == (k.dir / "vmlinuz", k.dir / "initrd.img")  # type: ignore[operator]
    assert booted.manifest["kernel"] == "6.12.95+deb12-amd64"
    assert booted.manifest["kernel_source"] == k.source
    assert image_kernel(img).boot_image(img) is img
    with pytest.raises(InputError) as e:
        resolve("6.12.95+deb12-amd46", img)
    assert "'6.12.95+deb12-amd64'" in (e.value.hint or "")


def test_plain_modules_are_carried_xzd(tmp_path: Path) -> None:
    """What a deb of 6.1 or a user's tree ships plain goes into the initrd xz'd (the
    guest's kmod reads .ko.xz); the early ones come out plain again for busybox."""
    ko = tmp_path / "kernel/drivers/md/dm-flakey.ko"
    ko.parent.mkdir(parents=True)
    body = b"\x7fELF dm-flakey" * 1000
    ko.write_bytes(body)
    initrd.compress(tmp_path)
    assert not ko.exists()
    xz = ko.with_name("dm-flakey.ko.xz")
    assert lzma.decompress(xz.read_bytes()) == body
    # kbuild's choice, which every kmod and the kernel's own decompressor read.
    assert xz.read_bytes()[6:8] == b"\x00\x01"  # stream flags: CRC32
    assert initrd.plain(xz, tmp_path).read_bytes() == body


def test_a_kernel_without_the_scenarios_filesystem_does_not_run_it(cache: Path) -> None:
    """ReiserFS left Linux in 6.13: on a kernel built without it, reiserfs-fsync is not
    run (exit 0, the reason named), never a failure nor a finding; a kernel with it runs
    it. What the lab keeps of a kernel's config is read from its whole config file."""
    from harness.kernel.store import OPTIONS

    every = {o: "m" for o in OPTIONS}
    sc = scenario.load("reiserfs-fsync")
    gone = _fake(cache, "6.13.0-noreiser", every, {"dm-dust": True, "zfs": False})
    (gone.dir / "config").write_text("CONFIG_EXT4_FS=m\n# CONFIG_REISERFS_FS is not set\n")
    with pytest.raises(NotRun) as n:
        lifecycle.require_kernel(gone, registry.variant(sc), sc)
    assert "CONFIG_REISERFS_FS" in n.value.message and n.value.exit_status == 0
    kept = _fake(cache, "6.12.9-reiser", every, {"dm-dust": True, "zfs": False})
    (kept.dir / "config").write_text("CONFIG_REISERFS_FS=m\n")
    lifecycle.require_kernel(kept, registry.variant(sc), sc)


def test_a_patched_image_kernel_runs_every_filesystem_the_image_kernel_does(
    cache: Path,
) -> None:
    """A mutant or --fs-patch kernel (here of fs/jfs) keeps no config file and only the
    options the lab tracks: it has every filesystem the image's kernel has, so jfs-fsync
    runs on a JFS patch (it was refused: "jfs needs CONFIG_JFS_FS, which it lacks")."""
    from harness.kernel.store import OPTIONS

    k = _fake(cache, "6.1.0-56-amd64+jfs-fix", {o: "m" for o in OPTIONS}, {"dm-dust": True})
    patched = dataclasses.replace(k, source={"kind": "mutant", "module": "fs/jfs"})
    sc = scenario.load("jfs-fsync")
    with pytest.raises(NotRun):
        lifecycle.require_kernel(k, registry.variant(sc), sc)  # a deb without its config
    lifecycle.require_kernel(patched, registry.variant(sc), sc)
    assert patched.config_value("REISERFS_FS") == "m"


def test_fs_patch_that_is_not_a_patch_says_so(tmp_path: Path) -> None:
    """--fs-patch with a one-line text file answered "kernel 'FILE': not a kernel the lab
    has ... scenario kernel add deb:linux-image-FILE" (issue 39): now it says the file is
    no patch, and of what a patch must be."""
    from harness.errors import InputError
    from harness.kernel import mutant

    f = tmp_path / "notes.txt"
    f.write_text("just a line\n")
    with pytest.raises(InputError, match="not a patch") as e:
        mutant.check_patch(f)
    assert "fs/ext4" in (e.value.hint or "")
    with pytest.raises(InputError, match="no such file"):
        mutant.check_patch(tmp_path / "missing.patch")
    assert mutant.check_patch(paths.REPO / "mutants" / "ext4-fsync-no-commit.patch")
