"""Fill a filesystem before the workload (``fs.fill``, runs inside the guest, stdlib only):
its blocks used up to a fraction, the free space left in holes between files.

Files of ``--chunk`` bytes are written under ``ROOT/.crashlab-fill`` until the
filesystem is fuller than the fraction by half again what is left; then every other one
is removed, which frees holes of one chunk each all over the disk, until it is back at
the fraction. An allocator then finds no large free extent: the workload's writes split
into many small ones, and near 1.0 they fail with ENOSPC (which the workload records,
harness/guest/opgen.py). The files are synced, and the directory is no part of the
workload's namespace (the oracle never names it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

FILL_DIR = ".crashlab-fill"
CHUNK = 128 * 1024  # each fill file, and so each hole the fill leaves
BLOCK = 4096  # the last files, once no chunk fits


def used(root: str) -> float:
    """The fraction of the filesystem's blocks in use, as root sees it: the workload runs
    as root, which may write into ext4's reserved blocks (``f_bfree``, not df's
    ``f_bavail``: filled by df's count, root still had 5 % to write into)."""
    st = os.statvfs(root)
    return 1.0 - st.f_bfree / st.f_blocks


def fill(root: str, fraction: float, chunk: int) -> dict[str, float | int]:
    where = os.path.join(root, FILL_DIR)
    os.makedirs(where, exist_ok=True)
    over = fraction + (1.0 - fraction) / 2
    names: list[str] = []
    # Chunks while there is room, then blocks: a filesystem refuses a large write well
    # before its last blocks are gone (ext4 keeps some for metadata), and a fraction
    # beyond what it gives leaves it full, every write that needs a block refused.
    for size in (chunk, BLOCK):
        block = os.urandom(size)  # not zeros: no filesystem may skip or share them
        while used(root) < over and _write(os.path.join(where, f"{len(names):06d}"), block):
            names.append(os.path.join(where, f"{len(names):06d}"))
    removed = 0
    for name in names[::2]:
        if used(root) <= fraction:
            break
        os.unlink(name)
        removed += 1
    os.sync()
    return {"files": len(names) - removed, "removed": removed, "used": round(used(root), 4)}


def _write(name: str, data: bytes) -> bool:
    """Write a fill file; False when the filesystem is full (what fit is kept)."""
    try:
        with open(name, "wb") as f:
            f.write(data)
    except OSError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fill", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--fraction", type=float, required=True)
    p.add_argument("--chunk", type=int, default=CHUNK)
    a = p.parse_args(argv)
    if not 0 < a.fraction < 1:
        print("fill: error: --fraction must be between 0 and 1", file=sys.stderr)
        return 2
    print(json.dumps(fill(a.root, a.fraction, a.chunk)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
