"""``scenario kernel build TREE`` (harness/kernel/build.py, kconfig.py): the fragment, what
survives of it, the cache key, bad input, and the config step on Debian's real
linux-source-6.1 tree. The compile itself is never run here (an hour on 2 cores)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.errors import EXIT_HARNESS, HarnessError, InputError, ToolMissing
from harness.kernel import build, kconfig, mutant
from harness.kernel.store import OPTIONS, Kernel, describe, parse_config, write_manifest

MAKEFILE = "VERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 192\nEXTRAVERSION =\n"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CRASHLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_shipped_fragment_asks_for_what_the_lab_needs() -> None:
    fragment = kconfig.parse_fragment(kconfig.fragment_path().read_text())
    for option in OPTIONS:
        assert fragment.get(option) in ("y", "m"), option
    assert fragment["VIRTIO_CONSOLE"] == "y"  # the guest agent's port
    assert fragment["EXT4_FS"] == "y"  # the root disk, with no module in the initrd


def test_what_did_not_survive_is_named_with_what_it_became() -> None:
    fragment = kconfig.parse_fragment(
        '# lab\nCONFIG_A=m\nCONFIG_B=y\nCONFIG_C=m\n# CONFIG_D is not set\nCONFIG_E="x"\n'
    )
    merged = 'CONFIG_A=y\nCONFIG_B=m\n# CONFIG_C is not set\nCONFIG_D=y\nCONFIG_E="x"\n'
    # A=m met by y (selected in); B asked y got m; C dropped; D set though not wanted.
    assert [str(x) for x in kconfig.lost(fragment, merged)] == [
        "CONFIG_B=y (got m)",
        "CONFIG_C=m (got not set)",
        "CONFIG_D=not set (got y)",
    ]
    assert kconfig.lost(fragment, 'CONFIG_A=m\nCONFIG_B=y\nCONFIG_C=m\nCONFIG_E="x"\n') == []


def test_a_fragment_line_that_is_no_option_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"frag:2: not a config line"):
        kconfig.parse_fragment("CONFIG_A=y\nDM_LOG_WRITES=y\n", "frag")


def test_the_cache_key_follows_source_and_config() -> None:
    key = build.cache_key("src", "CONFIG_A=y\n")
    assert key == build.cache_key("src", "CONFIG_A=y\n")
    assert key != build.cache_key("src2", "CONFIG_A=y\n")
    assert key != build.cache_key("src", "CONFIG_A=m\n")


def test_a_plain_trees_identity_is_its_files_sizes_and_mtimes(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text(MAKEFILE)
    (tmp_path / "fs").mkdir()
    (tmp_path / "fs" / "a.c").write_text("int a;\n")
    first, head = build.identity(tmp_path)
    assert head is None and first == build.identity(tmp_path)[0]
    os.utime(tmp_path / "fs" / "a.c", ns=(1, 1))
    touched = build.identity(tmp_path)[0]
    assert touched != first
    (tmp_path / "fs" / "b.c").write_text("")
    assert build.identity(tmp_path)[0] != touched


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_git_trees_identity_is_its_commit_diff_and_untracked_files(tmp_path: Path) -> None:
    tree = tmp_path / "linux"
    tree.mkdir()
    (tree / "Makefile").write_text(MAKEFILE)

    def git(*args: str, cwd: Path = tree) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=cwd,
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    git("add", "Makefile")
    git("commit", "-qm", "v")
    clean, head = build.identity(tree)
    assert head is not None and len(head) == 40
    # A clone of the commit (new mtimes everywhere) is the same source.
    git("clone", "-q", str(tree), str(tmp_path / "clone"), cwd=tmp_path)
    assert build.identity(tmp_path / "clone") == (clean, head)
    (tree / "Makefile").write_text(MAKEFILE + "# edited\n")
    edited = build.identity(tree)[0]
    assert edited != clean
    (tree / "new.c").write_text("int x;\n")
    assert build.identity(tree)[0] not in (clean, edited)


def test_bad_trees_are_named_before_any_make(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(InputError, match="no Makefile setting VERSION"):
        build.build(tmp_path, build.Base.DEFCONFIG, 2)
    (tmp_path / "Makefile").write_text(MAKEFILE)
    (tmp_path / ".config").write_text("CONFIG_A=y\n")
    with pytest.raises(InputError, match="configured in place") as e:
        build.build(tmp_path, build.Base.DEFCONFIG, 2)
    assert "mrproper" in (e.value.hint or "")
    assert build.kernel_version(tmp_path) == "6.1.192"
    assert not cache.exists()


def test_a_failed_build_step_is_a_harness_error_with_the_log(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    with pytest.raises(HarnessError) as e:
        build._make(["sh", "-c", "echo 'fs/ext4/inode.c:1: error: boom'; exit 2"], log, "make x")
    assert e.value.exit_status == EXIT_HARNESS
    assert "boom" in (e.value.detail or "") and str(log) in (e.value.hint or "")
    assert "make x failed (exit status 2)" in e.value.message


def test_a_built_kernel_says_where_it_came_from() -> None:
    source = {
        "kind": "build",
        "path": "/src/linux",
        "version": "6.1.192",
        "git_head": None,
        "source_sha256": "ab" * 32,
        "config_sha256": "cd" * 32,
        "base": "defconfig",
    }
    text = describe(source)
    assert "/src/linux" in text and "6.1.192" in text and "abababab" in text
    assert "defconfig" in text and "cdcdcdcd" in text


# -- the config step on the real tree ---------------------------------------------------


@pytest.fixture(scope="module")
def linux_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Debian's linux-source-6.1, unpacked once (about 15 s, 1.2 GB)."""
    if not mutant.SOURCE_TAR.is_file():
        pytest.skip(f"{mutant.SOURCE_TAR} absent: apt-get install linux-source-6.1")
    for tool in ("make", "gcc", "flex", "bison"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (scripts/install-host-deps)")
    top = tmp_path_factory.mktemp("src")
    subprocess.run(["tar", "-xJf", mutant.SOURCE_TAR, "-C", top], check=True)
    return top / mutant.TOP


def _listing(tree: Path) -> set[str]:
    return {str(p.relative_to(tree)) for p in tree.iterdir()}


def test_the_fragment_survives_over_debians_config(linux_source: Path, tmp_path: Path) -> None:
    try:
        build.debian_config()
    except ToolMissing:
        pytest.skip("the image kernel's headers (its Debian config) are not installed")
    before = _listing(linux_source)
    out = tmp_path / "O"
    text = build.configure(linux_source, out, build.Base.DEBIAN, tmp_path / "log")
    merged = parse_config(text)
    wanted = kconfig.parse_fragment(kconfig.fragment_path().read_text())
    for option, value in wanted.items():
        assert merged.get(option) == value or (value, merged.get(option)) == ("m", "y"), option
    # Debian's own modules stay (the base is kept); its signing key and debug info go.
    assert merged.get("NFS_FS") == "m" and "MODULE_SIG_ALL" not in merged
    assert merged.get("MODULE_SIG_KEY") == "certs/signing_key.pem"
    assert "DEBUG_INFO_BTF" not in merged
    assert _listing(linux_source) == before  # nothing written into the user's tree


def test_an_option_whose_dependency_is_off_is_named(
    linux_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frag = tmp_path / "kernel-fragment.config"
    frag.write_text("# CONFIG_MD is not set\nCONFIG_DM_LOG_WRITES=m\nCONFIG_EXT4_FS=y\n")
    monkeypatch.setattr(kconfig, "fragment_path", lambda: frag)
    with pytest.raises(InputError) as e:
        build.configure(linux_source, tmp_path / "O", build.Base.DEFCONFIG, tmp_path / "log")
    assert "CONFIG_DM_LOG_WRITES=m (got not set)" in e.value.message
    assert str(frag) in e.value.message and "EXT4" not in e.value.message
    assert "menuconfig" in (e.value.hint or "")


def test_the_same_source_and_config_again_builds_nothing(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "linux"
    tree.mkdir()
    (tree / "Makefile").write_text(MAKEFILE)
    config = {"text": "CONFIG_A=y\n"}
    monkeypatch.setattr(build, "configure", lambda *a: config["text"])
    made: list[list[str]] = []

    def make(argv: list[str | Path], log: Path, what: str, cwd: Path | None = None) -> None:
        made.append([str(a) for a in argv])
        raise HarnessError("stop here")

    monkeypatch.setattr(build, "_make", make)
    key = build.cache_key(build.identity(tree)[0], config["text"])
    entry = cache / "kernels" / "6.1.192-crashlab-x"
    entry.mkdir(parents=True)
    for f in ("vmlinuz", "initrd.img"):
        (entry / f).write_bytes(b"")
    k = Kernel("6.1.192-crashlab-x", "6.1.192-crashlab-x", {"kind": "build", "key": key}, {}, {})
    write_manifest(entry, k)
    got = build.build(tree, build.Base.DEFCONFIG, 2)
    assert (got.built_now, got.kernel.name, made) == (False, k.name, [])
    config["text"] = "CONFIG_A=m\n"  # another config: a build, into the lab's cache only
    with pytest.raises(HarnessError, match="stop here"):
        build.build(tree, build.Base.DEFCONFIG, 2)
    assert (
        "bzImage" in made[0]
        and f"O={build.build_dir(tree.resolve(), build.Base.DEFCONFIG)}" in made[0]
    )
    assert sorted(p.name for p in tree.iterdir()) == ["Makefile"]
