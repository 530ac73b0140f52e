"""``scenario import jlang`` (issue 37): CrashMonkey's own j-lang files (tests/data/jlang/)
become crash scenarios, each proved equivalent here -- an independent interpreter of
cmAdapter's C++ semantics runs the j-lang on one directory, opgen runs the converted ops
on another, and the trees (names, types, modes, sizes, data blocks, holes, xattrs, hard
links, where symlinks lead) and the persistence points at every checkpoint must agree --
and bad input is refused with the file, line and op, exit 2, nothing written."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.cli.main import main
from harness.config import scenario
from harness.errors import InputError
from harness.experiments.crash import jlang, jlangops
from harness.guest import opgen
from harness.model import opfile

DATA = Path(__file__).resolve().parent / "data" / "jlang"
FILES = sorted(p.name for p in DATA.iterdir() if p.name != "README.md")
BLOCK = 4096
PATTERN = b"ddddddddddklmnopqrstuvwxyz123456"  # cmAdapter's text: never a zero byte


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)  # CrashMonkey's, and what the conversion assumes
    yield
    os.umask(old)


class CrashMonkey:
    """cmAdapter's C++, line by line in Python: fd_X per name, paths from # define."""

    def __init__(self, root: Path, text: str) -> None:
        self.root, self.fds, self.persist = root, {}, 0
        self.checkpoints: list[tuple[int, int]] = []
        self.paths: dict[str, Path] = {"test": root}
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        section = ""
        self.lines: dict[str, list[tuple[int, list[str]]]] = {"setup": [], "run": []}
        for n, raw in enumerate(text.splitlines(), 1):
            w = raw.split()
            if w and w[0] == "#":
                section = w[-1]
            elif w and section == "define" and w[0] != "test":
                for ident in {w[0].replace("/", ""), w[0].split("/")[-1]}:
                    self.paths.setdefault(ident, root / w[0])
            elif w and section in self.lines:
                self.lines[section].append((n, w))

    def run(self) -> None:
        for n, w in self.lines["setup"]:
            getattr(self, "do_" + w[0])(n, *w[1:])
        if self.lines["setup"]:
            os.sync()  # CrashMonkey unmounts after setup
            self.persist += 1
        for n, w in self.lines["run"]:
            getattr(self, "do_" + w[0])(n, *w[1:])

    def fallocate(self, fd: int, mode: int, off: int, size: int) -> None:
        c = ctypes
        self.libc.fallocate.argtypes = [c.c_int, c.c_int, c.c_longlong, c.c_longlong]
        assert self.libc.fallocate(fd, mode, off, size) == 0, os.strerror(ctypes.get_errno())

    def do_mkdir(self, n: int, x: str, mode: str) -> None:
        os.mkdir(self.paths[x], int(mode, 8))

    def do_open(self, n: int, x: str, flags: str, mode: str) -> None:
        f = 0
        for name in flags.split("|"):
            f |= getattr(os, name)
        self.fds[x] = os.open(self.paths[x], f, int(mode, 8))

    def do_opendir(self, n: int, x: str, mode: str) -> None:
        self.fds[x] = os.open(self.paths[x], os.O_DIRECTORY)

    def do_close(self, n: int, x: str) -> None:
        os.close(self.fds.pop(x))

    def do_write(self, n: int, x: str, off: str, size: str) -> None:
        data = (PATTERN * (int(size) // len(PATTERN) + 1))[: int(size)]
        assert os.pwrite(self.fds[x], data, int(off)) == len(data)

    def do_dwrite(self, n: int, x: str, off: str, size: str) -> None:
        if x in self.fds:
            os.close(self.fds.pop(x))
        fd = os.open(self.paths[x], os.O_RDWR | os.O_DIRECT | os.O_SYNC, 0o777)
        buf = mmap.mmap(-1, int(size))
        buf.write((PATTERN * (int(size) // len(PATTERN) + 1))[: int(size)])
        assert os.pwrite(fd, buf, int(off)) == int(size)
        os.close(fd)
        self.persist += 1  # O_SYNC: durable on return

    def do_mmapwrite(self, n: int, x: str, off: str, size: str) -> None:
        o, s = int(off), int(size)
        self.fallocate(self.fds[x], 0, o, s)
        with mmap.mmap(self.fds[x], o + s) as m:
            m[o : o + s] = (PATTERN * (s // len(PATTERN) + 1))[:s]
            m.flush(o, min(8192, s))  # msync(MS_SYNC)
        self.persist += 1

    def do_falloc(self, n: int, x: str, mode: str, off: str, size: str) -> None:
        names = {"FALLOC_FL_KEEP_SIZE": 1, "FALLOC_FL_PUNCH_HOLE": 2, "FALLOC_FL_ZERO_RANGE": 16}
        m = sum(names.get(f, 0) for f in mode.split("|")) if "F" in mode else int(mode)
        self.fallocate(self.fds[x], m, int(off), int(size))

    def do_fsync(self, n: int, x: str) -> None:
        os.fsync(self.fds[x])
        self.persist += 1

    def do_fdatasync(self, n: int, x: str) -> None:
        os.fdatasync(self.fds[x])
        self.persist += 1

    def do_sync(self, n: int) -> None:
        os.sync()
        self.persist += 1

    def do_checkpoint(self, n: int, *_: str) -> None:
        self.checkpoints.append((n, self.persist))

    def do_none(self, n: int) -> None:
        pass

    def do_link(self, n: int, x: str, y: str) -> None:
        os.link(self.paths[x], self.paths[y])

    def do_symlink(self, n: int, x: str, y: str) -> None:
        os.symlink(self.paths[x], self.paths[y])  # absolute, as CrashMonkey's

    def do_rename(self, n: int, x: str, y: str) -> None:
        os.rename(self.paths[x], self.paths[y])

    def do_unlink(self, n: int, x: str) -> None:
        os.unlink(self.paths[x])

    def do_remove(self, n: int, x: str) -> None:  # remove(3)
        (os.rmdir if self.paths[x].is_dir() else os.unlink)(self.paths[x])

    def do_rmdir(self, n: int, x: str) -> None:
        os.rmdir(self.paths[x])

    def do_truncate(self, n: int, x: str, size: str) -> None:
        os.truncate(self.paths[x], int(size))

    def do_fsetxattr(self, n: int, x: str) -> None:
        os.setxattr(self.fds[x], "user.xattr1", b"val1")

    def do_removexattr(self, n: int, x: str) -> None:
        os.removexattr(self.paths[x], "user.xattr1")


def tree(root: Path) -> dict[str, Any]:
    """What the two runs must agree on, whatever bytes each wrote."""
    out: dict[str, Any] = {}
    names: dict[int, list[str]] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st = p.lstat()
            if p.is_symlink():
                out[rel] = ("symlink", os.path.relpath(os.path.realpath(p), root))
            elif p.is_dir():
                out[rel] = ("dir", oct(st.st_mode & 0o7777))
            else:
                data = p.read_bytes()
                blocks = "".join(
                    "d" if any(data[i : i + BLOCK]) else "0" for i in range(0, len(data), BLOCK)
                )
                xattrs = sorted(os.listxattr(p))
                out[rel] = ["file", oct(st.st_mode & 0o7777), st.st_size, blocks, xattrs]
                names.setdefault(st.st_ino, []).append(rel)
    for group in names.values():
        for rel in group:
            out[rel].append(sorted(group))
    return out


def equivalent(tmp_path: Path, src: Path, fs: str = "ext4") -> jlang.Converted:
    conv = jlang.convert(str(src), src.read_text(), fs)
    cm = CrashMonkey(tmp_path / "cm", src.read_text())
    cm.root.mkdir()
    cm.run()
    for fd in cm.fds.values():
        os.close(fd)
    ours = tmp_path / "lab"
    ours.mkdir()
    body = opgen.execute(str(ours), opfile.to_ops(opfile.parse(conv.text, fs)))
    assert body["complete"], body["error"]
    assert tree(ours) == tree(cm.root)
    assert conv.checkpoints == cm.checkpoints  # the same persistence points at each
    assert len(body["marks"]) == cm.persist + 1  # + the final sync opgen adds
    return conv


@pytest.mark.parametrize("name", FILES)
def test_each_crashmonkey_file_converts_to_an_equivalent_workload(
    name: str, tmp_path: Path
) -> None:
    equivalent(tmp_path, DATA / name)


def test_generic_039_converted_ops(tmp_path: Path) -> None:
    conv = equivalent(tmp_path, DATA / "generic_039.j")
    ops = [line for line in conv.text.splitlines() if not line.startswith("#")]
    assert ops == [
        "mkdir A", "sync", "sync",  # setup's sync, then CrashMonkey's unmount
        "create A/foo", "chmod A/foo 0755", "link A/foo A/bar", "sync", "unlink A/bar",
        "fsync A/foo",
    ]  # fmt: skip
    assert conv.setup_marks == 2 and conv.checkpoints == [(16, 4)]


def test_a_file_unlinked_while_open_is_held_and_fsynced_through_its_descriptor(
    tmp_path: Path,
) -> None:
    src = tmp_path / "held.j"
    src.write_text(
        "# define\nA\nA/foo\nA/bar\n\n# run\nmkdir A 0777\n"
        "open Afoo O_RDWR|O_CREAT 0644\nwrite Afoo 0 8192\nlink Afoo Abar\nunlink Afoo\n"
        "write Afoo 8192 100\nfsync Afoo\ncheckpoint 1\nclose Afoo\n"
    )
    conv = equivalent(tmp_path, src)
    ops = [line for line in conv.text.splitlines() if not line.startswith("#")]
    assert ops == [
        "mkdir A", "create A/foo", "open Afoo_8 A/foo", "write A/foo 0 8192",
        "link A/foo A/bar", "unlink A/foo", "write_fd Afoo_8 8192 100", "fsync_fd Afoo_8",
        "close Afoo_8",
    ]  # fmt: skip


def test_the_import_writes_a_crash_scenario_at_the_marks(tmp_path: Path) -> None:
    out = tmp_path / "generic-039.toml"
    assert main(["import", "jlang", str(DATA / "generic_039.j"), "-o", str(out)]) == 0
    sc: Any = scenario.load(out)
    assert sc.fs.type == "btrfs" and sc.workload.type == "file"
    assert [s.kind for s in sc.crash.states] == ["mark"]
    assert sc.crash.after_mark == "crashlab:sync:2"  # the run's states only
    assert "fsync A/foo" in sc.workload.text
    assert out.read_text().startswith("# imported from")
    xfs = tmp_path / "x.toml"
    assert main(["import", "jlang", str(DATA / "seq1-j-lang1"), "-o", str(xfs), "--fs", "xfs"]) == 0
    assert scenario.load(xfs).fs.type == "xfs"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("run", "line", "op", "message"),
    [
        ("frobnicate foo", 6, "frobnicate", "unknown j-lang op"),
        ("mknod foo TEST_FILE_PERMS|S_IFCHR|S_IFBLK 0", 6, "mknod", "device nodes"),
        ("open baz O_RDWR|O_CREAT 0777", 6, "open", "'baz' is not in # define"),
        ("open foo O_RDWR 0777", 6, "open", "O_CREAT is not given"),
        ("open foo O_RDWR|O_CREAT|O_DIRECT 0777", 6, "open", "open flags O_DIRECT"),
        ("open foo O_RDWR|O_CREAT 0777\nfsync bar", 7, "fsync", "fd_bar is not open"),
        ("open foo O_RDWR|O_CREAT 0777\nclose foo\ncheckpoint 1", 8, "checkpoint", "follows no"),
        ("open foo O_RDWR|O_CREAT 0777\nfalloc foo 8 0 4096", 7, "falloc", "fallocate mode"),
        ("open foo O_RDWR|O_CREAT 0777\ndwrite foo 0 100", 7, "dwrite", "O_DIRECT"),
        ("rmdir A", 6, "rmdir", "'A' does not exist"),
        ("open foo O_RDWR|O_CREAT 0777\nunlink foo\nfalloc foo 0 0 4096", 8, "falloc", "removed"),
        ("open foo O_RDWR|O_CREAT 0777\nlink foo bar\nlink foo bar", 8, "link", "exists already"),
    ],
)
def test_bad_input_names_file_line_and_op_exits_2_writes_nothing(
    run: str, line: int, op: str, message: str, tmp_path: Path, capsys: Any
) -> None:
    src = tmp_path / "bad.j"
    src.write_text(f"# define\nfoo\nbar\nA\n# run\n{run}\n")
    out = tmp_path / "out.toml"
    assert main(["import", "jlang", str(src), "-o", str(out)]) == 2
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))
    with pytest.raises(jlangops.JlangError) as e:
        jlang.convert(str(src), src.read_text())
    assert str(e.value).startswith(f"{src}:{line}: {op}: ") and message in str(e.value)
    assert f"{line}: {op}" in capsys.readouterr().err


def test_an_unknown_op_suggests_the_closest(tmp_path: Path) -> None:
    with pytest.raises(jlangops.JlangError) as e:
        jlang.convert("x.j", "# define\nfoo\n# run\nopen foo O_RDWR|O_CREAT 0777\nsetxattr foo\n")
    assert e.value.hint == "did you mean 'fsetxattr'?"


def test_j2_lang_templates_are_refused() -> None:
    with pytest.raises(InputError, match="J2-Lang"):
        jlang.convert("t.j", "# J2-Lang\nfile1 foo\nopen $file1 O_RDWR|O_CREAT 0777\n")


def test_an_existing_output_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "o.toml"
    out.write_text("keep\n")
    src = str(DATA / "generic_039.j")
    assert main(["import", "jlang", src, "-o", str(out)]) == 2
    assert out.read_text() == "keep\n"
    assert main(["import", "jlang", src, "-o", str(out), "--force"]) == 0
    assert "fsync A/foo" in out.read_text()
