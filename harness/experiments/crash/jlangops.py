"""cmAdapter's j-lang ops as the lab's workload-file lines, one method each (``Convert``),
with the tables they go by (argument counts, fallocate and open flags, modes) and the
error that names a refused line. ``jlang.py`` reads the file and runs the conversion
over its sections; its docstring gives the semantics these follow. Apart so that each
reads in one sitting."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from typing import Any

from harness.errors import InputError
from harness.model import opfile
from harness.model.ops import PERSIST_OPS

UMASK = 0o022  # CrashMonkey's harness: the default
CREATE_MODE, MKDIR_MODE = 0o644, 0o755  # what the lab's create and mkdir make (opgen)
XATTR = "user.xattr1"  # cmAdapter's fsetxattr / removexattr name; its value is 4 bytes
XATTR_LEN = 4
# cmAdapter's ops and their argument counts (``checkpoint`` takes 0 or 1).
ARGS: dict[str, tuple[int, ...]] = {
    "mkdir": (2,), "open": (3,), "opendir": (2,), "close": (1,), "write": (3,),
    "dwrite": (3,), "mmapwrite": (3,), "falloc": (4,), "fsync": (1,), "fdatasync": (1,),
    "sync": (0,), "checkpoint": (0, 1), "link": (2,), "symlink": (2,), "rename": (2,),
    "unlink": (1,), "remove": (1,), "rmdir": (1,), "truncate": (2,), "fsetxattr": (1,),
    "removexattr": (1,), "none": (0,),
}  # fmt: skip
UNSUPPORTED = {
    "mknod": "the lab's ops make no device nodes or FIFOs",
    "addToSetup": "cmAdapter's addToSetup (a second falloc in setup) is not a workload op",
}
FALLOC = {  # linux/falloc.h flags -> the lab's mode
    0: "default", 0x01: "keep_size", 0x03: "punch_hole", 0x10: "zero_range",
    0x11: "zero_range_keep_size",
}  # fmt: skip
FALLOC_FLAGS = {
    "0": 0, "FALLOC_FL_KEEP_SIZE": 0x01, "FALLOC_FL_PUNCH_HOLE": 0x02,
    "FALLOC_FL_COLLAPSE_RANGE": 0x08, "FALLOC_FL_ZERO_RANGE": 0x10,
    "FALLOC_FL_INSERT_RANGE": 0x20, "FALLOC_FL_UNSHARE_RANGE": 0x40,
}  # fmt: skip
OPEN_FLAGS = frozenset({"O_RDONLY", "O_WRONLY", "O_RDWR", "O_CREAT", "O_EXCL", "O_TRUNC"})


class JlangError(InputError):
    """A j-lang line the import refuses: its file, line and op."""

    def __init__(self, src: str, line: int, op: str, message: str, hint: str = "") -> None:
        where = f"{src}:{line}: {op}" if op else f"{src}:{line}"
        super().__init__(f"{where}: {message}", hint=hint or None)
        self.line, self.op = line, op


@dataclass
class Line:
    n: int
    section: str
    words: list[str]
    text: str

    @property
    def op(self) -> str:
        return self.words[0]


@dataclass
class Handle:
    """``fd_X``: the name it was opened by (None once removed), and how it is held."""

    key: int  # the open's line
    path: str | None
    kind: str  # file or dir
    writable: bool
    held: str = ""  # the lab's descriptor name, when held


class Convert:
    def __init__(self, src: str, names: dict[str, str], hold: set[int]) -> None:
        self.src, self.names, self.hold = src, names, hold
        self.kinds: dict[str, str] = {"": "dir"}
        self.fds: dict[str, Handle] = {}
        self.out: list[tuple[Line, str]] = []  # (j-lang line, workload-file line)
        self.needs: set[int] = set()  # opens whose name was removed while open
        self.persist = 0
        self.last = ""  # the last state-changing op emitted
        self.checkpoints: list[tuple[int, int]] = []
        self.used: set[str] = set()
        self.setup_marks = 0

    def fail(self, line: Line, message: str, hint: str = "") -> None:
        raise JlangError(self.src, line.n, line.op, message, hint)

    def emit(self, line: Line, *words: Any) -> None:
        self.out.append((line, " ".join(str(w) if w != "" else "." for w in words)))
        if words[0] != "close":
            self.last = str(words[0])
        self.persist += words[0] in PERSIST_OPS

    def path(self, line: Line, ident: str) -> str:
        if ident not in self.names:
            close = difflib.get_close_matches(ident, self.names, n=1)
            self.fail(
                line,
                f"{ident!r} is not in # define",
                f"did you mean {close[0]!r}?" if close else "define its path",
            )
        return self.names[ident]

    def handle(self, line: Line, ident: str) -> Handle:
        if ident not in self.fds:
            self.fail(line, f"fd_{ident} is not open", f"open {ident} first")
        return self.fds[ident]

    @staticmethod
    def live(h: Handle) -> str | None:
        """The name a descriptor op goes through; None once removed (then only the held
        descriptor reaches the file: the first pass finds those opens, the second holds
        them)."""
        return h.path

    def mode(self, line: Line, text: str) -> int:
        try:
            return int(text, 8) & ~UMASK & 0o7777
        except ValueError:
            self.fail(line, f"mode {text!r} is not octal", "e.g. 0777")
        raise AssertionError  # pragma: no cover

    def removed(self, path: str) -> None:
        for h in self.fds.values():
            if h.path == path:
                h.path = None
                self.needs.add(h.key)
        for p in [p for p in self.kinds if p == path or p.startswith(path + "/")]:
            del self.kinds[p]

    def moved(self, src: str, dst: str) -> None:
        def move(p: str) -> str:
            return dst + p[len(src) :] if p == src or p.startswith(src + "/") else p

        self.removed(dst)
        for h in self.fds.values():
            h.path = None if h.path is None else move(h.path)
        self.kinds = {move(p): k for p, k in self.kinds.items()}

    def close(self, line: Line, ident: str) -> None:
        h = self.fds.pop(ident)
        if h.held:
            self.emit(line, "close", h.held)

    def step(self, line: Line) -> None:
        k, a = line.op, line.words[1:]
        if k in UNSUPPORTED or any(w in UNSUPPORTED for w in a):
            self.fail(line, UNSUPPORTED[k if k in UNSUPPORTED else "addToSetup"])
        if k not in ARGS:
            close = difflib.get_close_matches(k, list(ARGS), n=1)
            self.fail(
                line,
                "unknown j-lang op",
                f"did you mean {close[0]!r}?" if close else "ops: " + " ".join(ARGS),
            )
        if len(a) not in ARGS[k]:
            self.fail(line, f"takes {' or '.join(map(str, ARGS[k]))} arguments, got {len(a)}")
        self.used.add(k)
        getattr(self, "op_" + k)(line, *a)

    def op_mkdir(self, line: Line, x: str, mode: str) -> None:
        p, m = self.path(line, x), self.mode(line, mode)
        self.emit(line, "mkdir", p)
        self.kinds[p] = "dir"
        if m != MKDIR_MODE:
            self.emit(line, "chmod", p, f"0{m:o}")

    def op_open(self, line: Line, x: str, flags: str, mode: str) -> None:
        p, want = self.path(line, x), set(flags.replace(" ", "").split("|"))
        if want - OPEN_FLAGS:
            self.fail(
                line,
                f"open flags {' '.join(sorted(want - OPEN_FLAGS))}",
                "the lab's ops take " + "|".join(sorted(OPEN_FLAGS)),
            )
        kind = self.kinds.get(p)
        if kind == "dir":
            self.fail(line, f"{p or '.'!r} is a directory", "opendir it")
        if kind is None:
            if "O_CREAT" not in want:
                self.fail(line, f"{p!r} does not exist and O_CREAT is not given")
            m = self.mode(line, mode)
            self.emit(line, "create", p)
            self.kinds[p] = "file"
            if m != CREATE_MODE:
                self.emit(line, "chmod", p, f"0{m:o}")
        elif "O_EXCL" in want and "O_CREAT" in want:
            self.fail(line, f"{p!r} exists (O_EXCL)")
        elif "O_TRUNC" in want:
            self.emit(line, "truncate", p, 0)
        self._hold(line, x, Handle(line.n, p, "file", bool(want & {"O_WRONLY", "O_RDWR"})))

    def op_opendir(self, line: Line, x: str, mode: str) -> None:
        p = self.path(line, x)
        if self.kinds.get(p) != "dir":
            self.fail(line, f"{p or '.'!r} is not a directory (opendir opens, never makes)")
        self._hold(line, x, Handle(line.n, p, "dir", False))

    def _hold(self, line: Line, x: str, h: Handle) -> None:
        # CrashMonkey leaks a descriptor opened again: the old one stays open, unused.
        if line.n in self.hold:
            h.held = f"{x}_{line.n}"
            self.emit(line, "open", h.held, h.path)
        self.fds[x] = h

    def op_close(self, line: Line, x: str) -> None:
        self.handle(line, x)
        self.close(line, x)

    def _file(self, line: Line, x: str, *, write: bool = True) -> Handle:
        h = self.handle(line, x)
        if h.kind != "file":
            self.fail(line, f"fd_{x} is a directory's descriptor")
        if write and not h.writable:
            self.fail(line, f"fd_{x} was opened read-only")
        return h

    def _by_name(self, line: Line, x: str, h: Handle) -> str:
        p = self.live(h)
        if p is None:
            self.fail(
                line,
                f"{x!r} was removed while open and the lab has no {line.op} through a descriptor",
            )
        return p or ""

    def op_write(self, line: Line, x: str, off: str, size: str) -> None:
        h = self._file(line, x)
        p = self.live(h)
        self.emit(line, *(("write_fd", h.held) if p is None else ("write", p)), off, size)

    def op_dwrite(self, line: Line, x: str, off: str, size: str) -> None:
        # cmAdapter: close fd_X, open X_path O_RDWR|O_DIRECT|O_SYNC, pwrite, close.
        if x in self.fds:
            self.close(line, x)
        self.emit(line, "dwrite_dsync", self.path(line, x), off, size)

    def op_mmapwrite(self, line: Line, x: str, off: str, size: str) -> None:
        p = self._by_name(line, x, self._file(line, x))
        self.emit(line, "falloc", p, "default", off, size)
        self.emit(line, "mwrite", p, off, size)
        self.emit(line, "fdatasync", p)

    def op_falloc(self, line: Line, x: str, mode: str, off: str, size: str) -> None:
        p = self._by_name(line, x, self._file(line, x))
        try:
            flags = sum(FALLOC_FLAGS[f] for f in mode.split("|"))
        except KeyError:
            flags = int(mode, 0) if mode.isdigit() or mode.startswith("0x") else -1
        if flags not in FALLOC:
            self.fail(
                line, f"fallocate mode {mode!r}", "the lab's modes: " + ", ".join(opfile.FALLOC)
            )
        self.emit(line, "falloc", p, FALLOC[flags], off, size)

    def _sync(self, line: Line, x: str, kind: str) -> None:
        h = self.handle(line, x)
        if kind == "fdatasync" and h.kind == "dir":
            self.fail(line, "fdatasync of a directory", "the lab's fdatasync takes a file")
        p = self.live(h)
        self.emit(line, *((kind + "_fd", h.held) if p is None else (kind, p)))

    def op_fsync(self, line: Line, x: str) -> None:
        self._sync(line, x, "fsync")

    def op_fdatasync(self, line: Line, x: str) -> None:
        self._sync(line, x, "fdatasync")

    def op_sync(self, line: Line) -> None:
        self.emit(line, "sync")

    def op_checkpoint(self, line: Line, *n: str) -> None:
        if self.last not in PERSIST_OPS:
            self.fail(
                line,
                "follows no fsync, fdatasync or sync",
                "the lab's crash states are at persistence points",
            )
        self.checkpoints.append((line.n, self.persist))

    def op_none(self, line: Line) -> None:
        pass

    def op_link(self, line: Line, x: str, y: str) -> None:
        p, q = self.path(line, x), self.path(line, y)
        self.emit(line, "link", p, q)
        self.kinds[q] = self.kinds.get(p, "file")

    def op_symlink(self, line: Line, x: str, y: str) -> None:
        p, q = self.path(line, x), self.path(line, y)
        self.emit(line, "symlink", os.path.relpath(p or ".", os.path.dirname(q) or "."), q)
        self.kinds[q] = "symlink"

    def op_rename(self, line: Line, x: str, y: str) -> None:
        p, q = self.path(line, x), self.path(line, y)
        self.emit(line, "rename", p, q)
        self.moved(p, q)

    def op_unlink(self, line: Line, x: str) -> None:
        p = self.path(line, x)
        self.emit(line, "unlink", p)
        self.removed(p)

    def op_remove(self, line: Line, x: str) -> None:  # remove(3): rmdir for a directory
        p = self.path(line, x)
        self.emit(line, "rmdir" if self.kinds.get(p) == "dir" else "unlink", p)
        self.removed(p)

    def op_rmdir(self, line: Line, x: str) -> None:
        p = self.path(line, x)
        self.emit(line, "rmdir", p)
        self.removed(p)

    def op_truncate(self, line: Line, x: str, size: str) -> None:
        self.emit(line, "truncate", self.path(line, x), size)

    def op_fsetxattr(self, line: Line, x: str) -> None:
        p = self._by_name(line, x, self._file(line, x, write=False))
        self.emit(line, "setxattr", p, XATTR, XATTR_LEN)

    def op_removexattr(self, line: Line, x: str) -> None:
        self.emit(line, "removexattr", self.path(line, x), XATTR)
