"""Damage done to a replayed crash image before it is checked: the lab's positive
control for the oracle (``crash.corrupt = "zero-durable-block"``).

A state whose mark requires a file with data gets the first block of that file zeroed,
on the host and in userspace: the image's journal is replayed first (``e2fsck -E
journal_only``, so the block map ``debugfs`` reads is the one a mount would see), then
``debugfs -R 'blocks PATH'`` names its first allocated block and it is overwritten with zeros. The
guest's oracle must then report ``data_loss``; a lab that calls such a state consistent
is broken. ext2/3/4 only (debugfs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import proc
from harness.errors import HarnessError
from harness.model.oracle import requirements

EXT = ("ext2", "ext3", "ext4")


def zero_durable_block(
    image: Path, fs: str, oracle: dict[str, Any], mark: str | None, exact: bool
) -> str | None:
    """Zero the first block of the first non-empty file ``mark`` requires; what was done,
    or None when the mark requires no data.

    :raise HarnessError: not an ext filesystem, or the tools failed on the image.
    """
    if fs not in EXT:
        raise HarnessError(f"crash.corrupt needs ext2/3/4 (debugfs), not {fs}")
    req = requirements(oracle, mark, exact)
    files = sorted(p for p, w in (req or {}).get("files", {}).items() if w["size"] > 0)
    if not files:
        return None
    proc.run(["e2fsck", "-E", "journal_only", "-p", image], check=False)
    target = files[0]
    # `blocks`, not `bmap PATH 0`: the workload writes sparse files, block 0 may be a hole.
    out = proc.run(["debugfs", "-R", f"blocks /{target}", image]).stdout.split()
    if not out or not out[0].isdigit():
        raise HarnessError(f"debugfs found no block for /{target} in {image}")
    block = int(out[0])
    size = _block_size(image)
    with open(image, "r+b") as f:
        f.seek(block * size)
        f.write(bytes(size))
    return f"zeroed block {block} (the first allocated one of /{target})"


def _block_size(image: Path) -> int:
    for line in proc.run(["dumpe2fs", "-h", image]).stdout.splitlines():
        if line.startswith("Block size:"):
            return int(line.split(":")[1])
    raise HarnessError(f"dumpe2fs shows no block size for {image}")
