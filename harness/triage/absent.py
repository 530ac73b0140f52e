"""Where a failing state's missing data is: the log entry after the cut that first
writes a block of each file the oracle found missing or different.

When no write of a state is needed for its failure (the minimal set is empty), what it
lacks was written later or never; this says which. Blocks are read from the log's final
image with debugfs (ext2/3/4 only), so a file renamed or removed by then is not found.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

from harness.record.logwrites import Log
from harness.replay import replayer as replay
from harness.triage import explain, ext
from harness.triage.blocks import EXT


def first_writes(
    lg: Log, fs_type: str, size: int, after: int, names: Iterable[str]
) -> dict[str, tuple[int, str | None]]:
    """For each of ``names`` found at the log's end: the first entry at or after
    ``after`` writing one of its data blocks, and the last mark before that entry."""
    names = sorted(set(names))
    if fs_type not in EXT or not names:
        return {}
    with tempfile.TemporaryDirectory(prefix="crashlab-absent-") as tmp:
        end = explain.whole(lg, len(lg.entries))
        image = replay.materialize(lg, end, Path(tmp) / "end.img", size)
        bs = ext.layout(image).block_size
        blocks = ext.file_blocks(image, names)
    marks = sorted(lg.marks)
    out: dict[str, tuple[int, str | None]] = {}
    for name, owned in blocks.items():
        for e in lg.entries[after:]:
            if e.is_write and owned & set(
                range(e.offset // bs, (e.offset + e.length - 1) // bs + 1)
            ):
                before = [m for m in marks if m < e.index]
                out[name] = (e.index, lg.marks[before[-1]] if before else None)
                break
    return out
