#!/usr/bin/env python3
"""A seeded file workload in rounds, for pool-level crash states (runs inside the guest).

Stdlib only; the host copies it into the guest. The host runs ``round`` N times; after
each round it runs ``zpool sync`` and marks every vdev's log ``crashlab:zsync:<n>``. A
round creates, overwrites, appends to or deletes a few of ``--files`` names, then prints
JSON: every file's sha256 after the round, and the names it touched. The host derives the
oracle from that: at mark n, every file that existed after round n and that round n+1
does not touch must be there with that content (round n+1 may have been in flight when
power failed, and ZFS may have synced part of it in a txg of its own).

``verify`` checks one mark's requirements under a mounted root and prints JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys

from ..model import contract


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def do_round(
    root: str, seed: int, n: int, files: int, max_size: int, ops: int
) -> contract.ZfsRound:
    rng = random.Random(f"{seed}:{n}")
    touched: list[str] = []
    for _ in range(ops):
        name = f"f{rng.randrange(files):03d}"
        path = os.path.join(root, name)
        exists = os.path.exists(path)
        kind = rng.choice(["overwrite", "append", "delete"] if exists else ["create"])
        if kind == "delete" and rng.random() < 0.5:
            kind = "overwrite"  # keep the pool from emptying out
        if kind == "delete":
            os.unlink(path)
        else:
            data = rng.randbytes(rng.randint(1, max_size))
            with open(path, "ab" if kind == "append" else "wb") as f:
                f.write(data)
        touched.append(name)
    state = {
        name: _digest(os.path.join(root, name))
        for name in sorted(os.listdir(root))
        if name.startswith("f") and os.path.isfile(os.path.join(root, name))
    }
    return contract.ZfsRound(round=n, files=state, touched=sorted(set(touched)))


def verify(root: str, required: dict[str, str]) -> contract.ZfsVerify:
    missing: list[str] = []
    mismatched: list[str] = []
    for name, want in sorted(required.items()):
        path = os.path.join(root, name)
        try:
            got = _digest(path)
        except OSError as e:
            missing.append(f"{name}: {e.strerror}")
            continue
        if got != want:
            mismatched.append(name)
    return contract.ZfsVerify(
        ok=not missing and not mismatched,
        checked=len(required),
        missing=missing,
        mismatched=mismatched,
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("round")
    r.add_argument("--root", required=True)
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--round", type=int, required=True)
    r.add_argument("--files", type=int, default=12)
    r.add_argument("--max-size", type=int, default=256 * 1024)
    r.add_argument("--ops", type=int, default=6)
    v = sub.add_parser("verify")
    v.add_argument("--root", required=True)
    v.add_argument("--required", required=True, help="JSON file: {name: sha256}")
    a = ap.parse_args()
    out: contract.Message
    if a.cmd == "round":
        out = do_round(a.root, a.seed, a.round, a.files, a.max_size, a.ops)
    else:
        with open(a.required) as f:
            out = verify(a.root, json.load(f))
    sys.stdout.write(out.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
