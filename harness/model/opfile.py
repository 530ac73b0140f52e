"""Workload files: a bug report's steps as the lab's ops (stdlib only; host and guest).

One op a line, ``#`` comments, paths relative to the filesystem's root (``.`` is the
root), sizes in bytes with an optional K, M or G suffix::

    mkdir d
    write d/foo 0 64K      # data drawn from the line number: the same bytes every run
    sync
    truncate d/foo 0
    fsync d/foo
    link d/foo d/bar
    fsync d                # a directory: its fsync

The ops, their arguments and what each does are the op table's (``ops.TABLE``): the
generator's and ACE's (create, write, fsync, rename, ...) and the ones real bugs need --
descriptors held by name (``open FD PATH``, ``tmpfile FD DIR``, then ``write_fd``,
``fsync_fd``, ``linkat``, ``close``), symbolic links, ``chmod``/``chown``/``utimes``,
renameat2 with RENAME_NOREPLACE or RENAME_EXCHANGE, ``dwrite_dsync``, btrfs subvolumes, and
``clone SRC DST`` (FICLONE into a new file, btrfs and xfs). Persistence points (the
table's ``persists``) each get a mark, and the oracle (``oracle/``) judges the states.

``parse`` checks the whole file against the namespace as the ops change it (a path that
does not exist, a name already taken, a descriptor never opened, an op the filesystem
cannot do) and raises ``OpFileError`` naming the line and the op; ``to_ops`` makes the
ops ``opgen.execute`` runs.
"""

from __future__ import annotations

import difflib
import os
import random
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .ops import FALLOC_MODES, PERSIST_OPS, SPECS, TABLE, Op, parent
from .oracle import Model

# Each op's arguments, in order: the table's, for the ops a workload file may name.
SPEC: dict[str, tuple[str, ...]] = {s.name: s.args for s in TABLE if s.in_files}
BLOCK = 4096
FALLOC = tuple(FALLOC_MODES)
_SIZE = re.compile(r"(0x[0-9a-fA-F]+|\d+)([KMG]?)", re.IGNORECASE)


class OpFileError(ValueError):
    """A line that is not a workload op: its number, the op, what is wrong, a hint."""

    def __init__(self, line: int, op: str, message: str, hint: str = "") -> None:
        super().__init__(f"line {line}: {op}: {message}" if op else f"line {line}: {message}")
        self.line, self.op, self.message, self.hint = line, op, message, hint


def parse(text: str, fs: str = "") -> list[dict[str, Any]]:
    """The ops of a workload file, checked against the namespace they build."""
    ops: list[dict[str, Any]] = []
    checker = _Checker(fs)
    for n, raw in enumerate(text.splitlines(), 1):
        try:
            words = shlex.split(raw, comments=True)
        except ValueError as e:
            raise OpFileError(n, "", str(e), "quote a path with spaces in '...'") from None
        if not words:
            continue
        op = _op(n, words)
        if SPECS[op["op"]].creates and not checker.exists(op["path"]):
            # As xfs_io -f and the shell's >: a write to a new name creates the file.
            made = {"op": "create", "line": n, "path": op["path"]}
            checker.check(made)
            ops.append(made)
        checker.check(op)
        ops.append(op)
    if not ops:
        raise OpFileError(0, "", "no ops", "one op a line, e.g. 'write foo 0 4K' then 'fsync foo'")
    return ops


def _op(n: int, words: list[str]) -> dict[str, Any]:
    name, args = words[0], words[1:]
    if name not in SPEC:
        close = difflib.get_close_matches(name, SPEC, n=1)
        hint = f"did you mean {close[0]!r}?" if close else "ops: " + " ".join(sorted(SPEC))
        raise OpFileError(n, name, "unknown op", hint)
    want = SPEC[name]
    if len(args) != len(want):
        usage = " ".join([name, *(w.upper() for w in want)])
        raise OpFileError(n, name, f"takes {len(want)} arguments, got {len(args)}", usage)
    op: dict[str, Any] = {"op": name, "line": n}
    for key, value in zip(want, args, strict=True):
        op[key] = _value(n, name, key, value)
    return op


def _value(n: int, op: str, key: str, value: str) -> Any:
    if key in ("path", "dst"):
        return _path(n, op, value)
    if key in ("offset", "length", "size"):
        m = _SIZE.fullmatch(value)
        if m is None:
            raise OpFileError(n, op, f"{key} {value!r} is not a size", "e.g. 4096, 64K, 0x1000")
        unit = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]
        return int(m.group(1), 0) * unit
    if key == "perm":
        try:
            return int(value, 8)
        except ValueError:
            raise OpFileError(n, op, f"mode {value!r} is not octal", "e.g. 0700") from None
    if key in ("uid", "gid"):
        if not value.isdigit():
            raise OpFileError(n, op, f"{key} {value!r} is not a number", "e.g. 1000")
        return int(value)
    if key == "mode" and value not in FALLOC:
        raise OpFileError(n, op, f"mode {value!r}", "one of " + ", ".join(FALLOC))
    if key == "name" and not value.startswith("user."):
        raise OpFileError(n, op, f"attribute {value!r}", "the user. namespace: user.a")
    return value


def _path(n: int, op: str, value: str) -> str:
    norm = os.path.normpath(value)
    if value.startswith("/") or norm == ".." or norm.startswith("../"):
        raise OpFileError(n, op, f"path {value!r} leaves the filesystem", "relative to its root")
    return "" if norm == "." else norm


@dataclass
class _Checker:
    """The namespace as the ops change it (the oracle's own model), for ``parse``."""

    fs: str

    def __post_init__(self) -> None:
        self.model = Model()
        self.symlinks: set[str] = set()
        self.ended = ""  # the op that ended the workload (a shutdown)

    def exists(self, path: str) -> bool:
        return path in self.model.files or path in self.model.dirs

    def check(self, op: dict[str, Any]) -> None:
        self._check(op)
        if op["op"] == "fsync" and op["path"] in self.model.dirs:
            op["op"] = "fsync_dir"  # a directory's fsync, as opgen calls it
        if op["op"] == "append":  # at the end the file has then
            op["offset"] = len(self.model.files[op["path"]].data)
        self.model.apply(to_op(op))
        if op["op"] == "symlink":
            self.symlinks.add(op["path"])

    def _check(self, op: dict[str, Any]) -> None:
        n, k, m = op["line"], op["op"], self.model

        def fail(message: str, hint: str = "") -> None:
            raise OpFileError(n, k, message, hint)

        path, dst, fd = op.get("path", ""), op.get("dst", ""), op.get("fd")
        spec = SPECS[k]
        if self.ended:
            fail(f"an op after {self.ended}", f"{self.ended} ends the workload: make it the last")
        if spec.ends:
            self.ended = k
        if spec.fs and self.fs and self.fs not in spec.fs:
            can = " or ".join(spec.fs)
            fail(
                f"{self.fs} cannot do {k} ({spec.syscall})",
                f"a {can} scenario: --set fs.type={spec.fs[0]}",
            )
        if spec.direct and (op["offset"] % BLOCK or op["length"] % BLOCK or not op["length"]):
            fail("O_DIRECT needs a block-aligned offset and length", f"multiples of {BLOCK}")
        if fd is not None and k not in ("open", "tmpfile") and fd not in m.handles:
            fail(f"descriptor {fd!r} is not open", f"open {fd} PATH first")
        if k in ("open", "tmpfile") and fd in m.handles:
            fail(f"descriptor {fd!r} is open already", f"close {fd} first")
        if k in ("write_fd", "linkat") and m.handle_inode(str(fd)) is None:
            fail(f"descriptor {fd!r} holds a directory, not a file")
        if spec.makes or k == "tmpfile":
            name = dst if spec.makes == "dst" else path
            d = path if k == "tmpfile" else parent(name)
            if k != "tmpfile" and self.exists(name):
                fail(f"{name!r} exists already", "a new name")
            if d not in m.dirs:
                fail(f"directory {d or '.'!r} does not exist", "mkdir it first")
        if spec.on_file or k in ("link", "unlink", "clone"):
            if path in m.dirs:
                fail(f"{path!r} is a directory")
            if path not in m.files:
                fail(f"{path!r} does not exist", self._closest(path))
            if path in self.symlinks and k not in ("unlink", "link"):
                fail(f"{path!r} is a symbolic link: the op would follow it")
        if k in ("fsync", "rename", "exchange", "open", "chmod", "chown", "utimes", "rmdir"):
            if path and not self.exists(path):
                fail(f"{path!r} does not exist", self._closest(path))
            if k in ("fsync", "open") and path in self.symlinks:
                fail(f"{path!r} is a symbolic link: open(2) would follow it")
        if k in ("fsync_dir", "rmdir", "snapshot") and path not in m.dirs:
            fail(f"{path!r} is not a directory", self._closest(path))
        if k == "rmdir" and m.under(path) != ([path], []):
            fail(f"{path!r} is not empty")
        if k == "exchange" and not self.exists(dst):
            fail(f"{dst!r} does not exist", "exchange swaps two existing names")
        if k == "rename" and dst in m.dirs:
            fail(f"{dst!r} is a directory", "rename onto a new name")
        if k in ("rename", "exchange") and path and dst and (dst + "/").startswith(path + "/"):
            fail(f"{dst!r} is inside {path!r}")
        if k == "removexattr" and op["name"] not in m.files[path].xattrs:
            fail(f"{path!r} has no attribute {op['name']!r}", "setxattr it first")
        if k in ("mwrite", "overwrite") and op["offset"] + op["length"] > len(m.files[path].data):
            fail("the range passes the file's end", "write or append to grow a file")

    def _closest(self, path: str) -> str:
        close = difflib.get_close_matches(path, [*self.model.files, *self.model.dirs], n=1)
        return f"did you mean {close[0]!r}?" if close else ""


def to_op(op: dict[str, Any]) -> Op:
    """One parsed op as ``ops.Op``; data drawn from its line number (and so the same
    bytes on every run and in every subset triage records)."""
    k = op["op"]
    length = int(op.get("length", 0))
    data = random.Random(f"line{op['line']}").randbytes(length) if length else b""
    offset = int(op.get("offset", 0))
    return Op(
        k,
        op.get("path", ""),
        dst=op.get("dst", ""),
        offset=offset,
        size=int(op.get("size", 0)),
        data=data,
        mode=op.get("mode", ""),
        name=op.get("name", ""),
        fd=op.get("fd", ""),
        target=op.get("target", ""),
        perm=int(op.get("perm", 0)),
        uid=int(op.get("uid", -1)),
        gid=int(op.get("gid", -1)),
    )


def to_ops(ops: Sequence[dict[str, Any]]) -> list[Op]:
    """``parse``'s ops as ``ops.Op``."""
    return [to_op(op) for op in ops]


def persistence_points(ops: Sequence[dict[str, Any]]) -> int:
    """How many marks the ops make (the final sync opgen adds not counted)."""
    return sum(op["op"] in PERSIST_OPS for op in ops)
