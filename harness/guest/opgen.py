#!/usr/bin/env python3
"""Seeded file-operation generator with a durability oracle (runs inside the guest).

Stdlib only and a single file: the host copies it into the guest and runs it there.

``run`` performs a random but seeded sequence of create / write / append / overwrite /
truncate / rename / link / unlink / mkdir and fsync / fdatasync / directory fsync / sync,
in the style of fsx, fsstress and ACE. After every sync-type call *returns*, it writes a
mark ``crashlab:sync:<n>`` (n = 1, 2, ...) into the dm-log-writes log with
``dmsetup message <dm-name> 0 mark crashlab:sync:<n>``. Because the mark is logged after
the call completed, every write and flush the call waited for precedes the mark in the
log. It finishes with ``sync`` and one last mark that requires everything.

The oracle (JSON) says, for each mark, which files and directories must exist, and with
exactly which content, in any crash state whose last mark is that one.

Durability model (sound, i.e. it never requires what Linux does not promise):

* A file's *data* is durable once fsync, fdatasync or sync returned after its last
  write or truncate. A new file's data is not durable until then, even when empty.
* A *name* (directory entry) is durable after sync, after fsync of its parent directory
  once the entry exists, or -- for files -- after fsync of the file through that very
  name. POSIX does not promise the last one, but ext4, xfs and btrfs all persist the
  name of a file they fsync (crash-consistency work such as ACE relies on the same
  rule). fdatasync does not make a name durable, and fsync of a directory does not
  make the directory's own name durable.
* A name counts only if every ancestor directory's name is durable as well; the root
  (the mount point) always is.
* The crash may fall anywhere after mark n and before mark n+1, so a file touched in
  that interval (written, truncated, renamed from or over, linked, unlinked -- through
  any of its names) is not required at mark n, even if it was durable at the mark.
* Only presence and content are checked: stale names (an unlinked file that comes back)
  are allowed, because an unlink is not durable until its directory is synced.

``verify`` reads back what one mark requires and prints a JSON verdict.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

FORMAT = "crashlab-oracle/1"
MARK_PREFIX = "crashlab:sync:"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

SYNC_OPS = frozenset({"fsync", "fdatasync", "fsync_dir", "sync"})
MAX_DEPTH = 3
# Write lengths are drawn up to one of these caps: sub-block, block and multi-block I/O.
WRITE_CAPS = (100, 4096, 65536)
WEIGHTS: dict[str, int] = {
    "create": 8,
    "write": 12,
    "append": 10,
    "overwrite": 8,
    "truncate": 5,
    "rename": 7,
    "link": 4,
    "unlink": 5,
    "mkdir": 3,
    "fsync": 12,
    "fdatasync": 6,
    "fsync_dir": 6,
    "sync": 2,
}


class UsageError(Exception):
    """Bad arguments or an unreadable oracle: exit 2."""


class OpFailed(Exception):
    """A file-system call failed during ``run``."""


@dataclass
class Inode:
    ino: int
    data: bytearray = field(default_factory=bytearray)
    data_durable: bool = False
    version: int = 0
    _digest: tuple[int, str] | None = None

    def changed(self) -> None:
        self.version += 1
        self.data_durable = False

    def sha256(self) -> str:
        if self._digest is None or self._digest[0] != self.version:
            self._digest = (self.version, hashlib.sha256(self.data).hexdigest())
        return self._digest[1]


@dataclass(frozen=True)
class Op:
    """One operation. ``path`` is relative to the root; ``data`` is never serialised."""

    kind: str
    path: str = ""
    dst: str = ""
    offset: int = 0
    size: int = 0
    data: bytes = b""

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.kind}
        if self.kind != "sync":
            d["path"] = self.path
        if self.kind in ("rename", "link"):
            d["dst"] = self.dst
        if self.kind in ("write", "append", "overwrite"):
            d["offset"] = self.offset
            d["length"] = len(self.data)
        if self.kind == "truncate":
            d["size"] = self.size
        return d


def parent(path: str) -> str:
    return path.rpartition("/")[0]


def join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


class Model:
    """The namespace and contents the real file system should hold, with durability."""

    def __init__(self, fsync_names: bool = True) -> None:
        # fsync(file) also makes the file's name durable (ext4, xfs, btrfs do it); with
        # False only POSIX's rule holds: the name needs an fsync of its directory (ext2).
        self.fsync_names = fsync_names
        self.files: dict[str, Inode] = {}
        self.file_name_durable: dict[str, bool] = {}
        self.dirs: dict[str, bool] = {"": True}
        self._next_ino = 1

    def apply(self, op: Op) -> None:
        k = op.kind
        if k == "create":
            self.files[op.path] = Inode(self._next_ino)
            self._next_ino += 1
            self.file_name_durable[op.path] = False
        elif k in ("write", "append", "overwrite"):
            inode = self.files[op.path]
            end = op.offset + len(op.data)
            if len(inode.data) < op.offset:
                inode.data.extend(bytes(op.offset - len(inode.data)))
            inode.data[op.offset : end] = op.data
            inode.changed()
        elif k == "truncate":
            inode = self.files[op.path]
            if op.size < len(inode.data):
                del inode.data[op.size :]
            else:
                inode.data.extend(bytes(op.size - len(inode.data)))
            inode.changed()
        elif k == "rename":
            if op.dst in self.files and self.files[op.dst] is self.files[op.path]:
                return  # POSIX: renaming a name onto another link of the same file does nothing
            self.files[op.dst] = self.files.pop(op.path)
            del self.file_name_durable[op.path]
            self.file_name_durable[op.dst] = False
        elif k == "link":
            self.files[op.dst] = self.files[op.path]
            self.file_name_durable[op.dst] = False
        elif k == "unlink":
            del self.files[op.path]
            del self.file_name_durable[op.path]
        elif k == "mkdir":
            self.dirs[op.path] = False
        elif k == "fsync":
            self.files[op.path].data_durable = True
            if self.fsync_names:
                self.file_name_durable[op.path] = True
        elif k == "fdatasync":
            self.files[op.path].data_durable = True
        elif k == "fsync_dir":
            for name in self.file_name_durable:
                if parent(name) == op.path:
                    self.file_name_durable[name] = True
            for d in self.dirs:
                if d and parent(d) == op.path:
                    self.dirs[d] = True
        elif k == "sync":
            for inode in self.files.values():
                inode.data_durable = True
            for name in self.file_name_durable:
                self.file_name_durable[name] = True
            for d in self.dirs:
                self.dirs[d] = True
        else:
            raise ValueError(f"unknown op {k!r}")

    def touches(self, op: Op) -> tuple[set[str], set[int]]:
        """Names and inodes an op changes; call before ``apply``."""
        k = op.kind
        if k in SYNC_OPS:
            return set(), set()
        if k in ("create", "mkdir"):
            return {op.path}, set()
        inodes = {self.files[op.path].ino}
        if k == "rename" and op.dst in self.files:
            inodes.add(self.files[op.dst].ino)
        return {op.path, op.dst} - {""}, inodes

    def dir_durable(self, d: str) -> bool:
        while d:
            if not self.dirs[d]:
                return False
            d = parent(d)
        return True

    def durable_files(self) -> dict[str, tuple[int, str, int]]:
        """Durable files as path -> (inode, sha256, size)."""
        out: dict[str, tuple[int, str, int]] = {}
        for path, inode in self.files.items():
            if (
                inode.data_durable
                and self.file_name_durable[path]
                and self.dir_durable(parent(path))
            ):
                out[path] = (inode.ino, inode.sha256(), len(inode.data))
        return out

    def durable_dirs(self) -> list[str]:
        return sorted(d for d in self.dirs if d and self.dir_durable(d))


class Generator:
    """Draws the next op from the seed and the model, so the sequence is deterministic."""

    def __init__(self, seed: int, max_files: int, max_size: int) -> None:
        self.rng = random.Random(seed)
        self.max_files = max_files
        self.max_size = max_size
        self.max_dirs = max(2, max_files // 4)
        self.counter = 0
        self.kinds = list(WEIGHTS)
        self.weights = list(WEIGHTS.values())

    def _name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _length(self, room: int) -> int:
        return self.rng.randint(1, min(self.rng.choice(WRITE_CAPS), room))

    def next(self, m: Model) -> Op:
        while True:
            kind = self.rng.choices(self.kinds, self.weights)[0]
            op = self._build(kind, m)
            if op is not None:
                return op

    def _build(self, kind: str, m: Model) -> Op | None:
        rng = self.rng
        files = sorted(m.files)
        dirs = sorted(m.dirs)
        if kind == "sync":
            return Op("sync")
        if kind == "fsync_dir":
            return Op("fsync_dir", rng.choice(dirs))
        if kind == "mkdir":
            roots = [d for d in dirs if d.count("/") + 1 < MAX_DEPTH or not d]
            if len(dirs) > self.max_dirs:
                return None
            return Op("mkdir", join(rng.choice(roots), self._name("d")))
        if kind == "create":
            if len(files) >= self.max_files:
                return None
            return Op("create", join(rng.choice(dirs), self._name("f")))
        if not files:
            return None
        path = rng.choice(files)
        size = len(m.files[path].data)
        if kind == "write":
            offset = rng.randrange(self.max_size)
            return Op(
                "write",
                path,
                offset=offset,
                data=rng.randbytes(self._length(self.max_size - offset)),
            )
        if kind == "append":
            if size >= self.max_size:
                return None
            return Op(
                "append", path, offset=size, data=rng.randbytes(self._length(self.max_size - size))
            )
        if kind == "overwrite":
            if size == 0:
                return None
            offset = rng.randrange(size)
            return Op(
                "overwrite", path, offset=offset, data=rng.randbytes(self._length(size - offset))
            )
        if kind == "truncate":
            return Op("truncate", path, size=rng.randint(0, self.max_size))
        if kind == "rename":
            others = [f for f in files if m.files[f].ino != m.files[path].ino]
            if others and rng.random() < 0.5:
                # Replace an existing file: the rename-over pattern of atomic updates.
                return Op("rename", path, dst=rng.choice(others))
            return Op("rename", path, dst=join(rng.choice(dirs), self._name("f")))
        if kind == "link":
            if len(files) >= self.max_files:
                return None
            return Op("link", path, dst=join(rng.choice(dirs), self._name("f")))
        if kind == "unlink":
            return Op("unlink", path)
        if kind in ("fsync", "fdatasync"):
            return Op(kind, path)
        raise ValueError(f"unknown op kind {kind!r}")


def perform(root: str, op: Op) -> None:
    """Do ``op`` on the real file system under ``root``."""
    p = os.path.join(root, op.path)
    k = op.kind
    if k == "create":
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    elif k in ("write", "append", "overwrite"):
        fd = os.open(p, os.O_WRONLY)
        try:
            view = memoryview(op.data)
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], op.offset + done)
        finally:
            os.close(fd)
    elif k == "truncate":
        os.truncate(p, op.size)
    elif k == "rename":
        os.rename(p, os.path.join(root, op.dst))
    elif k == "link":
        os.link(p, os.path.join(root, op.dst))
    elif k == "unlink":
        os.unlink(p)
    elif k == "mkdir":
        os.mkdir(p, 0o755)
    elif k in ("fsync", "fdatasync", "fsync_dir"):
        flags = os.O_RDONLY | (os.O_DIRECTORY if k == "fsync_dir" else 0)
        fd = os.open(p if op.path else root, flags)
        try:
            (os.fdatasync if k == "fdatasync" else os.fsync)(fd)
        finally:
            os.close(fd)
    elif k == "sync":
        os.sync()
    else:
        raise ValueError(f"unknown op {k!r}")


def emit_mark(mark_cmd: str, dm_name: str, text: str) -> None:
    if mark_cmd == "none":
        return
    # udev would otherwise be asked to settle after every message and stall the workload.
    env = dict(os.environ, DM_DISABLE_UDEV="1")
    argv = ["dmsetup", "message", dm_name, "0", "mark", text]
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    except OSError as e:
        raise OpFailed(f"cannot run {argv[0]}: {e.strerror}") from None
    if proc.returncode != 0:
        raise OpFailed(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")


class Recorder:
    """Keeps the marks; each mark's requirements are settled when the next one is made."""

    def __init__(self, mark_cmd: str, dm_name: str) -> None:
        self.mark_cmd = mark_cmd
        self.dm_name = dm_name
        self.marks: list[dict[str, Any]] = []
        self._pending: tuple[dict[str, Any], dict[str, tuple[int, str, int]], list[str]] | None = (
            None
        )
        self._paths: set[str] = set()
        self._inodes: set[int] = set()

    def touch(self, paths: Iterable[str], inodes: Iterable[int]) -> None:
        self._paths.update(paths)
        self._inodes.update(inodes)

    def settle(self) -> None:
        """Drop from the pending mark whatever was touched since it was made."""
        if self._pending is None:
            return
        entry, files, dirs = self._pending
        entry["files"] = {
            path: {"sha256": sha, "size": size}
            for path, (ino, sha, size) in sorted(files.items())
            if path not in self._paths and ino not in self._inodes
        }
        entry["dirs"] = [d for d in dirs if d not in self._paths]
        self.marks.append(entry)
        self._pending = None

    def mark(self, model: Model, after_op: int) -> str:
        self.settle()
        n = len(self.marks) + 1
        text = f"{MARK_PREFIX}{n}"
        emit_mark(self.mark_cmd, self.dm_name, text)
        entry: dict[str, Any] = {"mark": text, "n": n, "after_op": after_op}
        self._pending = (entry, model.durable_files(), model.durable_dirs())
        self._paths = set()
        self._inodes = set()
        return text


def execute(
    root: str,
    ops: Iterable[Op] | None = None,
    *,
    generator: Generator | None = None,
    count: int = 0,
    mark_cmd: str = "none",
    dm_name: str = "",
    fsync_names: bool = True,
) -> dict[str, Any]:
    """Run ops (given, or ``count`` drawn from ``generator``) and return the oracle body.

    The returned dict has ``marks``, ``final_mark``, ``ops``, ``complete`` and ``error``.
    """
    model = Model(fsync_names)
    rec = Recorder(mark_cmd, dm_name)
    log: list[dict[str, Any]] = []
    error: str | None = None

    def step(op: Op) -> None:
        paths, inodes = model.touches(op)
        rec.touch(paths, inodes)
        entry = {"i": len(log), **op.describe()}
        log.append(entry)
        try:
            perform(root, op)
        except OSError as e:
            raise OpFailed(f"op {entry['i']} {op.kind} {op.path!r}: {e.strerror}") from None
        model.apply(op)
        if op.kind in SYNC_OPS:
            entry["mark"] = rec.mark(model, entry["i"])

    def source() -> Iterable[Op]:
        if ops is not None:
            yield from ops
        elif generator is not None:
            for _ in range(count):
                yield generator.next(model)

    final_mark: str | None = None
    try:
        for op in source():
            step(op)
        step(Op("sync"))
        log[-1]["final"] = True
        final_mark = log[-1]["mark"]
    except OpFailed as e:
        error = str(e)
    rec.settle()
    return {
        "marks": rec.marks,
        "final_mark": final_mark,
        "ops": log,
        "complete": error is None,
        "error": error,
    }


def write_json(path: str, data: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def cmd_run(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: not a directory")
    if args.ops < 0 or args.files < 1 or args.max_size < 1:
        raise UsageError("--ops must be >= 0, --files and --max-size >= 1")
    if args.mark_cmd == "dmsetup" and not args.dm_name:
        raise UsageError("--mark-cmd dmsetup needs --dm-name (the dm-log-writes device)")
    gen = Generator(args.seed, args.files, args.max_size)
    body = execute(
        args.root,
        generator=gen,
        count=args.ops,
        mark_cmd=args.mark_cmd,
        dm_name=args.dm_name or "",
        fsync_names=args.fsync_names == "yes",
    )
    oracle = {
        "format": FORMAT,
        "mark_prefix": MARK_PREFIX,
        "seed": args.seed,
        "ops_requested": args.ops,
        "files": args.files,
        "max_size": args.max_size,
        "fsync_names": args.fsync_names == "yes",
        **body,
    }
    write_json(args.oracle, oracle)
    summary = {k: oracle[k] for k in ("complete", "error", "final_mark")}
    print(json.dumps({**summary, "marks": len(oracle["marks"]), "ops": len(oracle["ops"])}))
    return EXIT_OK if body["complete"] else EXIT_FAILED


def load_oracle(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise UsageError(f"--oracle {path}: {e.strerror}") from None
    except ValueError as e:
        raise UsageError(f"--oracle {path}: not JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"--oracle {path}: not a {FORMAT} file")
    return data


def file_digest(path: str) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def verify(root: str, oracle: dict[str, Any], mark: str | None) -> dict[str, Any]:
    """Check what ``mark`` requires; no mark or an unknown one requires nothing."""
    entry = next((m for m in oracle["marks"] if m["mark"] == mark), None)
    missing: list[str] = []
    mismatched: list[dict[str, Any]] = []
    checked = 0
    if entry is not None:
        for d in entry["dirs"]:
            checked += 1
            if not os.path.isdir(os.path.join(root, d)):
                missing.append(d + "/")
        for path, want in entry["files"].items():
            checked += 1
            full = os.path.join(root, path)
            if not os.path.isfile(full):
                missing.append(path)
                continue
            try:
                got, size = file_digest(full)
            except OSError as e:
                mismatched.append(
                    {
                        "path": path,
                        "expected": want["sha256"],
                        "got": None,
                        "size": None,
                        "error": e.strerror,
                    }
                )
                continue
            if got != want["sha256"]:
                mismatched.append(
                    {
                        "path": path,
                        "expected": want["sha256"],
                        "got": got,
                        "size": size,
                        "expected_size": want["size"],
                    }
                )
    return {
        "mark": mark,
        "known": entry is not None,
        "checked": checked,
        "missing": missing,
        "mismatched": mismatched,
        "ok": not missing and not mismatched,
    }


def cmd_verify(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: not a directory")
    oracle = load_oracle(args.oracle)
    print(json.dumps(verify(args.root, oracle, args.mark or None), sort_keys=True))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="opgen", description=__doc__.splitlines()[0] if __doc__ else ""
    )
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the seeded workload and write the oracle")
    r.add_argument("--root", required=True, help="directory on the file system under test")
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--ops", type=int, required=True, help="number of generated operations")
    r.add_argument("--files", type=int, default=16, help="most file names alive at once")
    r.add_argument("--max-size", type=int, default=256 * 1024, help="largest file size, bytes")
    r.add_argument("--mark-cmd", choices=("dmsetup", "none"), default="dmsetup")
    r.add_argument(
        "--fsync-names",
        choices=("yes", "no"),
        default="yes",
        help="does fsync(file) make its name durable? (no: POSIX, e.g. ext2)",
    )
    r.add_argument("--dm-name", help="the dm-log-writes device that receives the marks")
    r.add_argument("--oracle", required=True, help="where to write the oracle JSON")
    r.set_defaults(func=cmd_run)
    v = sub.add_parser("verify", help="check a mounted crash state against the oracle")
    v.add_argument("--root", required=True)
    v.add_argument("--oracle", required=True)
    v.add_argument("--mark", default="", help="last mark in the crash state; empty for none")
    v.set_defaults(func=cmd_verify)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = args.func(args)
    except UsageError as e:
        print(f"opgen: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return status


if __name__ == "__main__":
    sys.exit(main())
