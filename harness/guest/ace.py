#!/usr/bin/env python3
"""ACE's bounded workloads (CrashMonkey, OSDI'18), enumerated, and one recorded.

The command line over the model's grammar (``harness/model/ace.py``) and its walk
(``acespace.py``): ``list``, ``count`` and ``index`` print what the host computes
itself (``python3 -m harness.guest.ace count --seq 3 --grammar ace-x``); ``record`` and
``serve`` are the guest's part, rebuilding workload ``i`` from its index and running it
under its own dm-log-writes log (opgen's ``execute``), so only indices cross.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..model import contract, families, kernlog
from ..model.ace import GRAMMARS, describe, index_of, ops_of, source_ops, space
from ..model.acespace import count, selection
from ..model.ops import ENDS
from ..model.oracle import FORMAT, MARK_PREFIX
from . import fifoserve, fill, opgen, runner

UNSUPPORTED = (errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL)


def cmd_record(a: argparse.Namespace) -> contract.AceRecord:
    """Record workload ``--index`` on a fresh filesystem under its own dm-log-writes
    log: dm-linear slices of the data and log disks, so one guest records many."""
    # Names of this workload's own, and tables that name devices by number: a path in
    # /dev/mapper made by dmsetup without udev can outlive its device and name the next
    # one made, so a reused name could log one workload's writes into another's slice.
    lw = f"{a.name}-{a.index}"
    dut, log = f"{lw}-dut", f"{lw}-log"

    def sh(step: str, argv: list[str]) -> str:
        r = runner.run(argv, a.timeout)
        if r.rc != 0:
            raise StepFailed(step, argv, r.stderr or r.stdout)
        return str(r.stdout)

    def mark(text: str) -> None:
        sh("mark", ["dmsetup", "message", lw, "0", "mark", text])

    def number(name: str) -> str:
        out = sh("dm-create", ["dmsetup", "info", "-c", "--noheadings", "-o", "major,minor", name])
        return out.strip()

    start = time.monotonic()
    result: dict[str, Any] = {"index": a.index}
    made: list[str] = []
    try:
        for name, disk, offset in ((dut, a.dut, a.dut_offset), (log, a.log, a.log_offset)):
            sectors = a.size // 512 if name == dut else a.log_size // 512
            table = f"0 {sectors} linear {disk} {offset // 512}"
            sh("dm-create", ["dmsetup", "create", name, "--table", table])
            made.append(name)
        table = f"0 {a.size // 512} log-writes {number(dut)} {number(log)}"
        sh("dm-create", ["dmsetup", "create", lw, "--table", table])
        made.append(lw)
        dev = f"/dev/mapper/{lw}"
        sh("mkfs", [*json.loads(a.mkfs), dev])
        mark("crashlab:mkfs")
        sh("mount", [*json.loads(a.mount), dev, a.root])
        if a.fill:  # before the base file set: the states start after its sync
            result["fill"] = fill.fill(a.root, a.fill, fill.CHUNK)
        body = opgen.execute(
            a.root,
            _ops(a),
            mark_cmd="dmsetup",
            dm_name=lw,
            fsync_names=a.fsync_names == "yes",
            noop_sync=a.noop_sync,
            flush_after_sync=a.flush_after_sync,
            ordered=a.ordered_metadata,
            end=a.end,
            tolerate=opgen.FULL_DISK if a.fill else frozenset(),
        )
        sh("umount", ["umount", a.root])
        mark("crashlab:umount")
        result["oracle"] = {"format": FORMAT, "mark_prefix": MARK_PREFIX, **body}
        result["status"] = "recorded" if body["complete"] else _failed(body, a.source)
    except StepFailed as e:
        result["status"] = "failed"
        result["error"] = str(e)
    finally:
        runner.run(["umount", a.root], a.timeout)
        for name in reversed(made):
            r = runner.run(["dmsetup", "remove", name], a.timeout)
            if r.rc != 0:  # the next workload must not find this one's devices
                result["status"] = "failed"
                result["error"] = f"dmsetup remove {name}: {(r.stderr or r.stdout).strip()}"
        # dm-log-writes says it lost entries only in the kernel log: read it (and clear
        # it) per workload, so a lost log fails this workload, not its whole batch.
        kmsg = runner.run(["dmesg", "-c"], a.timeout).stdout.splitlines()
        said = kernlog.log_writes_errors(kmsg)
        disks = kernlog.disk_errors(kmsg)
        if said or disks:
            # A lost log, or a disk the host failed: this workload is a harness outcome
            # alone, with the kernel's own lines (the block layer's first) kept.
            result["status"] = "failed"
            lost = "dm-log-writes: " + " | ".join(said[:5])
            result["error"] = lost if said else kernlog.DISK_FAILED
            result["kernel"] = [*disks, *said][:20]
    result["seconds"] = round(time.monotonic() - start, 3)
    return contract.AceRecord(**result)


def serve(folder: str) -> None:
    """Record workloads one after another for as long as the guest lives (fifoserve.py):
    each request the JSON list of ``record``'s arguments, each reply its record.

    Starting Python and importing this module cost 0.9 s a workload under TCG, beside
    its 1.4 s of recording (btrfs, seq-2). A request that raises gets a record of
    status ``failed`` whose error is the traceback (index -1: it may not have said
    one), the lab's own failure for that workload; the devices it made are gone
    (``cmd_record`` removes them on the way out), so the next one starts clean.
    """

    def handle(line: str) -> str:
        return cmd_record(record_args(json.loads(line))).to_json()

    def failed(text: str) -> str:
        error = contract.excerpt(text)
        return contract.AceRecord(index=-1, status="failed", seconds=0.0, error=error).to_json()

    fifoserve.serve(folder, handle, failed)


def record_args(argv: list[str]) -> argparse.Namespace:
    """``record``'s arguments parsed as ``ace.py record`` parses them; arguments it
    refuses are a ValueError that says why (argparse would print it and exit)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(["record", *argv])
    except SystemExit:
        raise ValueError(f"record {argv}: {err.getvalue().strip()}") from None


def _ops(a: argparse.Namespace) -> list[Any]:
    """The workload's ops: ACE's ``--index``, or ``--keep`` of a ``--source``'s."""
    if a.source is None:
        return ops_of(a.seq, a.index, a.grammar)
    ops = source_ops(json.loads(a.source))
    keep = [int(i) for i in a.keep.split(",") if i] if a.keep is not None else range(len(ops))
    return [ops[i] for i in keep]


def _failed(body: dict[str, Any], source: str | None) -> str:
    """An op the filesystem does not support is a skipped workload; an op of a subset
    of a workload (``--source``) that fails (a write to a file whose create was left
    out) makes the subset no workload; another failure is the lab's to explain."""
    if body.get("errno") in UNSUPPORTED:
        return "unsupported"
    return "invalid" if source is not None and body.get("errno") is not None else "failed"


class StepFailed(Exception):
    def __init__(self, step: str, argv: list[str], output: str) -> None:
        super().__init__(f"{step}: {' '.join(argv)}: {output.strip()[-800:]}")


def cmd_list(a: argparse.Namespace) -> int:
    fam = a.family
    for i in selection(a.seq, a.sample, a.seed, a.limit, a.classes, grammar=a.grammar, family=fam):
        print(json.dumps(describe(a.seq, i, a.grammar)))
    return 0


def cmd_count(a: argparse.Namespace) -> int:
    """Per sequence length: the indices, the valid workloads, and each family's."""
    for seq in a.seq:
        cells = [f"{count(seq, a.grammar):,} valid of {space(seq, a.grammar):,} indices"]
        cells += [f"{f} {count(seq, a.grammar, f):,}" for f in families.FAMILIES]
        print(f"{a.grammar} seq-{seq}: " + "; ".join(cells))
    return 0


def cmd_index(a: argparse.Namespace) -> int:
    """The workload (id and ops) of each shape, as ``list`` prints them."""
    for ops in a.ops:
        i = index_of(ops, a.grammar)
        print(json.dumps(describe(len(ops.split(";")), i, a.grammar)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ace", description=(__doc__ or "").splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="the workloads a run takes, one JSON line each")
    ls.add_argument("--seq", type=int, default=1)
    ls.add_argument("--sample", type=int, default=0)
    ls.add_argument("--seed", type=int, default=1)
    ls.add_argument("--limit", type=int, default=0)
    ls.add_argument("--classes", nargs="*", default=(), help="only these core op classes")
    ls.add_argument("--grammar", choices=GRAMMARS, default="ace")
    ls.add_argument("--family", choices=sorted(families.FAMILIES), default="")
    ls.set_defaults(func=cmd_list)
    n = sub.add_parser("count", help="exact counts per sequence length and op family")
    n.add_argument("--seq", type=int, nargs="+", default=[1, 2, 3])
    n.add_argument("--grammar", choices=GRAMMARS, default="ace")
    n.set_defaults(func=cmd_count)
    x = sub.add_parser("index", help="the workload of ops spelt as list spells them")
    x.add_argument("--grammar", choices=GRAMMARS, default="ace")
    x.add_argument("ops", nargs="+", help="e.g. 'mkdir(B); append(foo) fsync(foo)'")
    x.set_defaults(func=cmd_index)
    r = sub.add_parser("record", help="record one workload under its own log")
    r.add_argument("--seq", type=int, default=1)
    r.add_argument("--grammar", choices=GRAMMARS, default="ace")
    r.add_argument("--index", type=int, required=True, help="ACE's index; names the devices")
    r.add_argument("--source", help="another workload's ops, as JSON (source_ops)")
    r.add_argument("--keep", help="only these ops of --source, by index: 0,3,4")
    r.add_argument("--name", required=True, help="the dm-log-writes device's name")
    r.add_argument("--dut", required=True)
    r.add_argument("--dut-offset", type=int, required=True)
    r.add_argument("--size", type=int, required=True, help="the filesystem's device size")
    r.add_argument("--log", required=True)
    r.add_argument("--log-offset", type=int, required=True)
    r.add_argument("--log-size", type=int, required=True)
    r.add_argument("--mkfs", required=True, help="mkfs argv as JSON, without the device")
    r.add_argument("--mount", required=True, help="mount argv as JSON, without dev and dir")
    r.add_argument("--root", required=True)
    r.add_argument("--fsync-names", choices=("yes", "no"), default="yes")
    r.add_argument("--noop-sync", action="store_true")
    r.add_argument("--flush-after-sync", action="store_true")
    r.add_argument("--ordered-metadata", action="store_true", help="oracle rule 18 too")
    r.add_argument("--end", choices=("sync", *ENDS), default="sync", help="the last op")
    r.add_argument("--fill", type=float, default=0.0, help="fs.fill: fill to this fraction")
    r.add_argument("--timeout", type=float, default=300)
    s = sub.add_parser("serve", help="record workloads asked through FIFOs in FOLDER")
    s.add_argument("folder")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.command == "record":
        print(cmd_record(a).to_json())
        return 0
    if a.command == "serve":
        serve(a.folder)  # answers until the guest is gone
        return 0
    status: int = a.func(a)
    return status


if __name__ == "__main__":
    sys.exit(main())
