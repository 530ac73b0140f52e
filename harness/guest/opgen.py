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

The oracle (JSON) says, for each mark, what a crash state whose last mark it is must
hold; its rules, and the guarantee each rests on, are in ``oracle.py`` (beside this file
in the guest), which also checks a mounted state (``verify``).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import opfile
from ..model.generate import Generator, family_seed
from ..model.ops import ENDS, HANDLE_OPS, PERSIST_OPS, SPECS, WRITE_OPS, Op
from ..model.oracle import FORMAT, MARK_PREFIX, Tracker, UsageError, load_oracle, verify
from . import procs, runner
from .syscalls import perform

# Ops that change a file's bytes: after one failed, the file is read back (``failed``).
BYTES_OPS = frozenset({*WRITE_OPS, "truncate", "falloc", "rewrite"})
FULL_DISK = frozenset({errno.ENOSPC, errno.EDQUOT})  # what a filled disk fails an op with
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class OpFailed(Exception):
    """A file-system call failed during ``run``."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


def flush_device(dm_name: str) -> None:
    """fsync the device-mapper device ``dm_name``: its dirty page cache, then a FLUSH."""
    try:
        fd = os.open(f"/dev/mapper/{dm_name}", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise OpFailed(f"fsync of /dev/mapper/{dm_name}: {e.strerror}") from None


def emit_mark(mark_cmd: str, dm_name: str, text: str) -> None:
    """The mark in the log of the device ``dm_name``, or of each of a comma-separated
    list: those are suspended while the marks go in, so that no write reaches one
    between its mark and another's -- the marks are one moment of every device
    (harness/record/recorder.py: mark_logs)."""
    if mark_cmd == "none":
        return
    names = dm_name.split(",")
    many = len(names) > 1
    for name in names if many else ():
        _dmsetup(["suspend", "--nolockfs", name])
    for name in names:
        _dmsetup(["message", name, "0", "mark", text])
    for name in names if many else ():
        _dmsetup(["resume", name])


def _dmsetup(args: list[str]) -> None:
    argv = ["dmsetup", *args]
    try:
        r = runner.run(argv)  # its environment keeps udev from stalling every message
    except OSError as e:
        raise OpFailed(f"cannot run {argv[0]}: {e.strerror}") from None
    if r.rc != 0:
        raise OpFailed(f"{' '.join(argv)} failed ({r.rc}): {r.stderr.strip()}")


@dataclass(frozen=True)
class Marking:
    """How each persistence op's mark reaches the log, and what the calls may fail with
    (``execute``'s keyword arguments of the same names)."""

    mark_cmd: str = "none"
    dm_name: str = ""
    noop_sync: bool = False
    flush_after_sync: bool = False
    on_mark: Callable[[str], None] | None = None
    tolerate: frozenset[int] = frozenset()


class Execution:
    """One workload's calls, the model they drive and the op list, each op recorded when
    it returned (one process: in turn; several: ``race``, under a lock)."""

    def __init__(self, root: str, track: Tracker, how: Marking) -> None:
        self.root, self.track, self.how = root, track, how
        self.log: list[dict[str, Any]] = []
        self.fds: dict[str, int] = {}  # a workload file's held descriptors
        self.held: dict[int, dict[str, int]] = {}  # each racing process's own
        self.lock = threading.Lock()
        self.unmade: set[str] = set()  # names whose making op the full disk failed

    def step(self, op: Op) -> None:
        """One op in turn: its call, then the model and its mark. An op of a workload file
        on a name whose making op the full disk failed is not called (it would fail with
        ENOENT): it is recorded failed, as the call would have been, and changes nothing."""
        makes = SPECS[op.kind].makes
        made = getattr(op, makes) if makes else ""
        if self.unmade & ({op.path, op.dst} - {"", made}):
            self.log.append({"i": len(self.log), **op.describe(), "failed": "ENOENT"})
            return
        self.track.before(op)
        entry = {"i": len(self.log), **op.describe()}
        self.log.append(entry)
        try:
            perform(self.root, op, self.how.noop_sync, self.fds)
        except OSError as e:
            answers = {getattr(errno, a) for a in SPECS[op.kind].answers}  # on any disk
            if e.errno not in self.how.tolerate | answers or op.kind in HANDLE_OPS:
                raise OpFailed(
                    f"op {entry['i']} {op.kind} {op.path!r}: {e.strerror}", e.errno
                ) from None
            entry["failed"] = errno.errorcode.get(e.errno or 0, str(e.errno))
            self.failed(op)
            if made:
                self.unmade.add(made)
            return
        self.unmade.discard(made)
        self.track.after(op)
        self.place_mark(op, entry)

    def place_mark(self, op: Op, entry: dict[str, Any]) -> None:
        h = self.how
        if op.kind in PERSIST_OPS:
            if (h.flush_after_sync or op.kind in ENDS) and h.dm_name and not h.noop_sync:
                for name in h.dm_name.split(","):
                    flush_device(name)
            text = self.track.next_mark()
            emit_mark(h.mark_cmd, h.dm_name, text)
            self.track.mark(text, entry["i"])
            entry["mark"] = text
            if h.on_mark is not None:
                h.on_mark(text)

    def failed(self, op: Op) -> None:
        """An op the full disk failed: a namespace op or an attribute changed nothing; a
        write, truncate or fallocate may have changed some bytes (a short write, a
        partial allocation), so the model takes the file's bytes as they are now --
        none of them durable. A failed persistence op places no mark: it promised
        nothing."""
        if op.kind in BYTES_OPS and op.path in self.track.model.files:
            with open(os.path.join(self.root, op.path), "rb") as f:
                self.track.after(Op("rewrite", op.path, data=f.read()))

    def race(self, generator: Generator, count: int, n: int, fsync_names: bool) -> None:
        """``count`` ops drawn and called by ``n`` processes at once (``procs.py``)."""
        for k in range(n):
            self.step(Op("mkdir", procs.home(k)))
        self.step(Op("sync"))

        def make(k: int) -> Generator:
            return generator.fork(procs.seed_of(generator.seed, k), generator.max_files // n or 1)

        failure = procs.run(n, count, make, fsync_names, self.call, self.returned)
        if failure is not None:
            raise failure

    def call(self, op: Op, k: int) -> int:
        """Process ``k``'s call; the marks placed when it started (``returned`` frees
        what it touched from every mark placed while it ran: ``Tracker.late``)."""
        with self.lock:
            since = self.track.rec.placed
        try:
            perform(self.root, op, self.how.noop_sync, self.held.setdefault(k, {}))
        except OSError as e:
            raise OpFailed(f"process {k}: {op.kind} {op.path!r}: {e.strerror}", e.errno) from None
        return since

    def returned(self, op: Op, k: int, since: int) -> None:
        with self.lock:  # the model, the op list and the marks: one order, the returns'
            self.track.late(op, since)
            self.track.before(op)
            entry = {"i": len(self.log), "proc": k, **op.describe()}
            self.log.append(entry)
            self.track.after(op)
            self.place_mark(op, entry)

    def close(self) -> None:
        for fd in [*self.fds.values(), *(f for d in self.held.values() for f in d.values())]:
            os.close(fd)


def execute(
    root: str,
    ops: Iterable[Op] | None = None,
    *,
    generator: Generator | None = None,
    count: int = 0,
    fsync_names: bool = True,
    ordered: bool = False,
    end: str = "sync",
    processes: int = 1,
    **marking: Any,
) -> dict[str, Any]:
    """Run ops (given, or ``count`` drawn from ``generator``) and return the oracle body.

    ``on_mark(text)`` runs after each mark, before the next op: where a runtime fault is
    switched on at a sync point (``dropremount.py``). ``flush_after_sync`` fsyncs the
    device ``dm_name`` after each sync call, before its mark: the device's dirty buffer
    cache is written and a cache FLUSH sent (blkdev_fsync) -- an experiment that tells a
    filesystem's missing flush from a rule of ours (the model does not change). ``end``
    is the op that ends the workload: ``sync``, or a shutdown (``crash.method``); a
    workload whose own ops end with a shutdown ends there. After a shutdown the device
    is flushed before its mark: a shutdown loses no cache, so the state at its mark is
    every write the filesystem sent. An op failing with an errno in ``tolerate``
    (ENOSPC on a filled disk, ``fs.fill``) is recorded as failed (its entry's
    ``failed``) and the workload goes on. ``processes`` > 1: the generator's ``count``
    ops are drawn and called by that many processes at once, each in its own directory
    (``procs.py`` says why the oracle stays sound). The returned dict has ``marks``,
    ``final_mark``, ``ops``, ``complete`` and ``error``.
    """
    track = Tracker(fsync_names, ordered, root)
    run = Execution(root, track, Marking(**marking))
    error: str | None = None
    final_mark: str | None = None
    failed_errno: int | None = None
    try:
        if ops is not None:
            for op in ops:
                run.step(op)
        elif generator is not None and processes == 1:
            for _ in range(count):
                run.step(generator.next(track.model))
        elif generator is not None:
            run.race(generator, count, processes, fsync_names)
        if not (run.log and run.log[-1]["op"] in ENDS):
            run.step(Op(end))
        run.log[-1]["final"] = True
        final_mark = run.log[-1]["mark"]
    except OpFailed as e:
        error, failed_errno = str(e), e.errno
    finally:
        run.close()
    return {
        "profile": track.profile,
        "marks": track.marks(),
        "final_mark": final_mark,
        "ops": run.log,
        "complete": error is None,
        "error": error,
        "errno": failed_errno,
    }


def write_json(path: str, data: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def oracle_doc(args: argparse.Namespace, body: dict[str, Any]) -> dict[str, Any]:
    """The oracle file of a run with ``run``'s arguments and ``execute``'s body."""
    return {
        "format": FORMAT,
        "mark_prefix": MARK_PREFIX,
        "seed": args.seed,
        "ops_requested": args.ops,
        "files": args.files,
        "max_size": args.max_size,
        "fsync_names": args.fsync_names == "yes",
        **({"bug_ops": True} if getattr(args, "bug_ops", False) else {}),  # dropremount: none
        **({"family": args.family} if getattr(args, "family", "") else {}),
        **({"processes": args.processes} if getattr(args, "processes", 1) > 1 else {}),
        **body,
    }


def cmd_run(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: not a directory")
    if args.ops < 0 or args.files < 1 or args.max_size < 1:
        raise UsageError("--ops must be >= 0, --files and --max-size >= 1")
    if (args.mark_cmd == "dmsetup" or args.flush_after_sync) and not args.dm_name:
        raise UsageError("--mark-cmd dmsetup needs --dm-name (the dm-log-writes device)")
    if args.family and not args.ops_file:
        args.seed = family_seed(args)
    gen = Generator(args.seed, args.files, args.max_size, args.extended, args.bug_ops)
    ops = None
    if args.ops_file:  # a workload file's ops (opfile.py), parsed and checked on the host
        with open(args.ops_file) as f:
            ops = opfile.to_ops(json.load(f))
    body = execute(
        args.root,
        ops,
        generator=gen,
        count=args.ops,
        mark_cmd=args.mark_cmd,
        dm_name=args.dm_name or "",
        fsync_names=args.fsync_names == "yes",
        noop_sync=args.noop_sync,
        flush_after_sync=args.flush_after_sync,
        ordered=args.ordered_metadata,
        end=args.end,
        tolerate=FULL_DISK if args.tolerate_enospc else frozenset(),
        processes=args.processes,
    )
    oracle = oracle_doc(args, body)
    write_json(args.oracle, oracle)
    summary = {k: oracle[k] for k in ("complete", "error", "final_mark")}
    print(json.dumps({**summary, "marks": len(oracle["marks"]), "ops": len(oracle["ops"])}))
    return EXIT_OK if body["complete"] else EXIT_FAILED


def cmd_verify(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: not a directory")
    oracle = load_oracle(args.oracle)
    said = verify(args.root, oracle, args.mark or None, args.exact)
    print(json.dumps(said.to_dict(), sort_keys=True))
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
    r.add_argument("--family", default="", help="draw seeds from --seed until one's ops are of it")
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
    r.add_argument(
        "--noop-sync",
        action="store_true",
        help="never really fsync/sync (a positive control: the oracle must catch it)",
    )
    r.add_argument(
        "--flush-after-sync",
        action="store_true",
        help="fsync the --dm-name device after every sync call (an experiment)",
    )
    r.add_argument(
        "--extended",
        action="store_true",
        help="also O_DIRECT/mmap writes, fallocate, xattrs, rmdir, O_SYNC/O_DSYNC writes,"
        " sync_file_range, syncfs",
    )
    r.add_argument("--oracle", required=True, help="where to write the oracle JSON")
    r.add_argument("--ops-file", help="run these ops (JSON from opfile.py) instead of drawing")
    r.add_argument(
        "--bug-ops",
        action="store_true",
        help="also truncate to 0, symlink, chmod, RENAME_EXCHANGE/NOREPLACE and ops through"
        " a descriptor held across unlink (write_fd, fsync_fd)",
    )
    r.add_argument(
        "--ordered-metadata",
        action="store_true",
        help="judge by the ordered-metadata profile (oracle.py rule 18)",
    )
    r.add_argument(
        "--end",
        choices=("sync", *ENDS),
        default="sync",
        help="the op that ends the workload: sync, or a shutdown (crash.method)",
    )
    r.add_argument(
        "--tolerate-enospc",
        action="store_true",
        help="an op failing with ENOSPC or EDQUOT is recorded as failed (fs.fill)",
    )
    r.add_argument(
        "--processes",
        type=int,
        default=1,
        help="draw and call the ops in this many processes at once (procs.py)",
    )
    r.set_defaults(func=cmd_run)
    v = sub.add_parser("verify", help="check a mounted crash state against the oracle")
    v.add_argument("--root", required=True)
    v.add_argument("--oracle", required=True)
    v.add_argument("--mark", default="", help="last mark in the crash state; empty for none")
    v.add_argument("--exact", action="store_true", help="the state is cut exactly at --mark")
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
