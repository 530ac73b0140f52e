#!/usr/bin/env python3
"""Application update patterns, and what a crash state left of each target file (runs
inside the guest; stdlib only, copied in beside opgen.py and oracle.py).

``run`` performs one pattern, every *case* of it (a combination of the optional fsyncs)
on its own target files, in one recording:

- ``replace-rename``: write ``f.tmp``, [fsync it], rename it over ``f``, [fsync the dir];
- ``replace-truncate``: open ``f`` with O_TRUNC, write the new content, [fsync|fdatasync];
- ``append-log``: append records to ``f``, each [fsync|fdatasync]'d or not;
- ``sqlite-commit``: SQLite transactions (``sqlitepat.py``);
- ``e4defrag`` (seed 004): files fragmented by interleaved appends, each fsync'd, then
  synced, then defragmented one by one (EXT4_IOC_MOVE_EXT): no byte may change at any
  state (the oracle's rule 11); their extents and read time before and after are kept.

The file patterns are a list of opgen ``Op``s run by ``opgen.execute``, so the marks and
the durability oracle are the op generator's (sound: it requires only what fsync and
rename promise, and that is what decides ``data_loss``). On top, the oracle gets
``targets``: per target file its case, its old and new content (regenerated from the
seed) and where its update begins. ``classify`` says what a mounted crash state holds
of each target: ``new``, ``old``, ``empty``, ``partial`` (a prefix of, or a block-wise
mix of, old and new), ``zeros`` (a prefix followed by NUL bytes up to the file's size),
``missing`` or ``garbage`` -- a measurement, not a verdict.

Cases are interleaved (each case's first file, then each case's second, ...), so the
fsyncs of the later cases commit the journal while earlier un-fsync'd replaces may
still have their data in the page cache: the window the seed describes.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..model.ops import PERSIST_OPS, Op
from ..model.oracle import AFTER_FINAL, FORMAT, MARK_PREFIX, UsageError, requirements
from . import runner
from .opgen import execute, write_json

BLOCK = 4096
RECORDS = 4  # append-log: records appended per target

# pattern -> its cases: (label, the sync after the update step(s)).
CASES: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    "replace-rename": (
        ("rename without fsync", {"fsync_tmp": False, "fsync_dir": False}),
        ("rename + dir fsync", {"fsync_tmp": False, "fsync_dir": True}),
        ("fsync tmp + rename", {"fsync_tmp": True, "fsync_dir": False}),
        ("fsync tmp + rename + dir fsync", {"fsync_tmp": True, "fsync_dir": True}),
    ),
    "replace-truncate": (
        ("O_TRUNC rewrite without fsync", {"sync": None}),
        ("O_TRUNC rewrite + fsync", {"sync": "fsync"}),
        ("O_TRUNC rewrite + fdatasync", {"sync": "fdatasync"}),
    ),
    "append-log": (
        ("append without fsync", {"sync": None}),
        ("append + fsync", {"sync": "fsync"}),
        ("append + fdatasync", {"sync": "fdatasync"}),
    ),
    "e4defrag": (("defrag of fsync'd appends", {}),),
}
# e4defrag: appends per file, interleaved across the files so each fsync'd append
# allocates next to another file's: as many extents per file as rounds.
ROUNDS = 8
PATTERNS = (*CASES, "sqlite-commit")
CLASSES = ("new", "old", "partial", "empty", "missing", "garbage")


def content(seed: int, path: str, version: str, size: int) -> bytes:
    """The seeded bytes of one version of a target: the classifier regenerates them."""
    return random.Random(f"{seed}:{path}:{version}").randbytes(size)


def slug(label: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in label.lower()).split())


def plan(pattern: str, seed: int, files: int, size: int) -> tuple[list[Op], list[dict[str, Any]]]:
    """The ops of ``pattern`` and its targets (without their oracle positions yet)."""
    rng = random.Random(f"{seed}:{pattern}")
    targets: list[dict[str, Any]] = []
    for i in range(files):
        for label, how in CASES[pattern]:
            path = f"{slug(label)}-{i}"
            old = rng.randint(max(1, size // 2), size)
            new = rng.randint(max(1, size // 2), size)
            targets.append({"path": path, "case": label, "how": how, "old": old, "new": new})
    setup: list[Op] = []
    if pattern == "e4defrag":
        setup += _fragment(seed, targets)
    else:
        for t in targets:
            first = content(seed, t["path"], "old", t["old"])
            setup += [Op("create", t["path"]), Op("write", t["path"], data=first)]
    setup.append(Op("sync"))  # every old version durable before any update starts
    ops = list(setup)
    for t in targets:
        t["first_op"] = len(ops)
        ops += _update(pattern, seed, t)
        t.pop("how")
    return ops, targets


def _fragment(seed: int, targets: list[dict[str, Any]]) -> list[Op]:
    """Create the targets and fill them in ``ROUNDS`` interleaved, fsync'd appends."""
    ops = [Op("create", t["path"]) for t in targets]
    for t in targets:
        t["new"] = t["old"]  # defragmenting changes no byte
    for r in range(ROUNDS):
        for t in targets:
            whole = content(seed, t["path"], "old", t["old"])
            a, b = len(whole) * r // ROUNDS, len(whole) * (r + 1) // ROUNDS
            ops += [Op("append", t["path"], offset=a, data=whole[a:b]), Op("fsync", t["path"])]
    return ops


def _update(pattern: str, seed: int, t: dict[str, Any]) -> list[Op]:
    path, how = t["path"], t["how"]
    if pattern == "e4defrag":
        return [Op("defrag", path)]
    new = content(seed, path, "new", t["new"])
    if pattern == "replace-rename":
        tmp = path + ".tmp"
        ops = [Op("create", tmp), Op("write", tmp, data=new)]
        ops += [Op("fsync", tmp)] if how["fsync_tmp"] else []
        ops.append(Op("rename", tmp, dst=path))
        return ops + ([Op("fsync_dir", "")] if how["fsync_dir"] else [])
    sync = [Op(how["sync"], path)] if how["sync"] else []
    if pattern == "replace-truncate":
        return [Op("rewrite", path, data=new), *sync]
    ops = []
    start = t["old"]
    cuts = sorted({start, *random.Random(f"{seed}:{path}:cuts").sample(
        range(start + 1, start + len(new)), min(RECORDS - 1, len(new) - 1)
    ), start + len(new)})  # fmt: skip
    whole = content(seed, path, "old", t["old"]) + new
    for a, b in itertools.pairwise(cuts):
        ops += [Op("append", path, offset=a, data=whole[a:b]), *sync]
    return ops


def place(targets: list[dict[str, Any]], marks: Sequence[dict[str, Any]]) -> None:
    """Each target's ``start_n``: the last mark before its update began (0: none). A
    state whose last mark is earlier cannot have seen the update, so it is not counted."""
    for t in targets:
        t["start_n"] = max((m["n"] for m in marks if m["after_op"] < t["first_op"]), default=0)


def mark_number(oracle: dict[str, Any], mark: str | None) -> int:
    """n of a state's last mark (0 right after mkfs; past every mark after the final)."""
    if mark is None:
        return 0
    if mark in AFTER_FINAL:
        return len(oracle["marks"]) + 1
    return next((int(m["n"]) for m in oracle["marks"] if m["mark"] == mark), 0)


def classify_bytes(data: bytes | None, old: bytes, new: bytes) -> str:
    if data is None:
        return "missing"
    if data == new:
        return "new"
    if data == old:
        return "old"
    if not data:
        return "empty"
    if new.startswith(data) or old.startswith(data):
        return "partial"
    if len(data) <= max(len(old), len(new)) and all(
        data[o : o + BLOCK] in (old[o : o + BLOCK], new[o : o + BLOCK])
        for o in range(0, len(data), BLOCK)
    ):
        return "partial"  # every block is the old or the new one: a mix
    head = data.rstrip(b"\0")
    if len(data) <= max(len(old), len(new)) and (new.startswith(head) or old.startswith(head)):
        # The size reached the disk before the bytes it covers: what an append inside an
        # allocated block or a delayed allocation leaves (the "NUL bytes after a crash"
        # of XFS and ext4 folklore); the contents are random, so a NUL tail is not theirs.
        return "zeros"
    return "garbage"


def classify(
    root: str, oracle: dict[str, Any], mark: str | None, exact: bool
) -> list[dict[str, Any]]:
    """What the mounted state at ``root`` holds of each target its update may have
    reached; ``promised``: the oracle requires the new content here."""
    if oracle.get("pattern") == "sqlite-commit":
        from .sqlitepat import classify_dbs

        dbs: list[dict[str, Any]] = classify_dbs(root, oracle, mark, exact)
        return dbs
    n = mark_number(oracle, mark)
    req = requirements(oracle, mark, exact) or {"files": {}}
    seed = int(oracle["seed"])
    out = []
    for t in oracle.get("targets", []):
        if n < t["start_n"]:
            continue
        path = os.path.join(root, t["path"])
        data: bytes | None = None
        error = None
        if os.path.isfile(path):
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError as e:  # unreadable: what the application gets is no content
                error, data = e.strerror, b"\0"
        old = content(seed, t["path"], "old", t["old"])
        new = content(seed, t["path"], "new", t["new"])
        if oracle["pattern"] == "append-log":
            new = old + new
        elif oracle["pattern"] == "e4defrag":
            new = old
        out.append(
            {
                "target": t["path"],
                "case": t["case"],
                "class": classify_bytes(data, old, new),
                "size": None if data is None else len(data),
                "promised": req["files"].get(t["path"], {}).get("sha256")
                == hashlib.sha256(new).hexdigest(),
                **({"error": error} if error else {}),
            }
        )
    return out


def file_layout(root: str, targets: list[dict[str, Any]]) -> dict[str, Any]:
    """Each target's extent count (filefrag) and the seconds to read them all cold, with
    O_DIRECT: what defragmenting changed. Under TCG the seconds compare with each other
    only (the seed measured 25 % faster reads on real disks)."""
    paths = [os.path.join(root, t["path"]) for t in targets]
    extents = {}
    for t, p in zip(targets, paths, strict=True):
        out = runner.run(["filefrag", p], 60).stdout  # "<path>: 8 extents found"
        extents[t["path"]] = int(out.rsplit(":", 1)[1].split()[0])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    start = time.monotonic()
    for p in paths:
        runner.run(["dd", f"if={p}", "of=/dev/null", "bs=1M", "iflag=direct"], 60)
    return {"extents": extents, "read_seconds": round(time.monotonic() - start, 4)}


def cmd_run(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: not a directory")
    if args.pattern not in PATTERNS:
        raise UsageError(f"--pattern {args.pattern!r}: valid patterns are {', '.join(PATTERNS)}")
    if args.files < 1 or args.size < 1:
        raise UsageError("--files and --size must be >= 1")
    head = {"format": FORMAT, "mark_prefix": MARK_PREFIX, "seed": args.seed}
    head |= {"pattern": args.pattern, "files": args.files, "size": args.size}
    head |= {"transactions": args.transactions}
    if args.pattern == "sqlite-commit":
        from .sqlitepat import run_dbs

        body = run_dbs(
            args.root, args.seed, args.transactions, args.size, args.mark_cmd, args.dm_name
        )
    else:
        ops, targets = plan(args.pattern, args.seed, args.files, args.size)
        layout: dict[str, Any] = {}
        # The mark of the sync that ends the setup: the files as the update finds them.
        setup_mark = (
            f"{MARK_PREFIX}{sum(o.kind in PERSIST_OPS for o in ops[: targets[0]['first_op']])}"
        )

        def before(text: str) -> None:
            if args.pattern == "e4defrag" and text == setup_mark:
                layout["before"] = file_layout(args.root, targets)

        body = execute(
            args.root,
            ops,
            mark_cmd=args.mark_cmd,
            dm_name=args.dm_name or "",
            fsync_names=args.fsync_names == "yes",
            on_mark=before,
        )
        if layout:
            layout["after"] = file_layout(args.root, targets)
            body["layout"] = layout
        place(targets, body["marks"])
        body["targets"] = targets
        body["fsync_names"] = args.fsync_names == "yes"
    write_json(args.oracle, {**head, **body})
    print(json.dumps({k: body[k] for k in ("complete", "error", "final_mark")}))
    return 0 if body["complete"] else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="apppat", description="application update patterns")
    p.add_argument("--pattern", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--files", type=int, default=2, help="target files per case")
    p.add_argument("--size", type=int, default=16384, help="largest content, bytes")
    p.add_argument("--transactions", type=int, default=4, help="sqlite: per database")
    p.add_argument("--fsync-names", choices=("yes", "no"), default="yes")
    p.add_argument("--mark-cmd", choices=("dmsetup", "none"), default="dmsetup")
    p.add_argument("--dm-name", default="")
    p.add_argument("--oracle", required=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return cmd_run(args)
    except UsageError as e:
        print(f"apppat: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
