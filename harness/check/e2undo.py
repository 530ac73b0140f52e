"""Putting an image back from e2fsck's undo file (``-z``) in this process: what e2undo
does, without starting it. The journal replay of every ext3/4 crash state is undone this
way; e2undo cost 2-4 ms a state, a fifth of a small state's whole check
(bench/README.md).

The format, E2UNDO02 (e2fsprogs misc/e2undo.c, lib/ext2fs/undo_io.c): a header block,
a copy of the superblock as e2fsck left it, then key blocks, each followed by the data
its keys describe. A key says where a saved run of bytes goes (``fsblk`` in units of the
header's ``fs_block_size``) and how long it is. e2undo also checks each block's crc32c;
that guards an undo file kept across a reboot, not one written to ``/dev/shm`` by the
e2fsck that exited a moment ago. Anything this reader does not fully understand -- an
unfinished file (e2fsck was killed), an incompat feature, a key block without its magic,
a superblock that is not the image's -- is left to e2undo itself.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

MAGIC = b"E2UNDO02"
# magic, num_keys, super_offset, key_offset, block_size, fs_block_size, sb_crc, state,
# f_compat, f_incompat, f_rocompat, pad32, fs_offset
HEADER = struct.Struct("<8sQQQIIIIIIIIQ")
KEY = struct.Struct("<QII")  # fsblk, blk_crc, size
KEYBLOCK_MAGIC = 0xCADECADE
KEYBLOCK_HEAD = 16  # magic, crc, reserved
STATE_FINISHED = 0x1
COMPAT_FS_OFFSET = 0x1
SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE = 1024, 1024


def keys(undo: Path) -> int:
    """How many saved blocks the undo file holds (its header's ``num_keys``). An e2fsck
    that could not open the image still leaves a header-only file that e2undo calls
    corrupt: it wrote nothing, so there is nothing to put back (and a destroyed
    superblock stays a finding instead of becoming a harness error)."""
    try:
        with open(undo, "rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        return 0
    if len(head) < 16 or head[:8] != MAGIC:
        return 0
    return int.from_bytes(head[8:16], "little")


def restore(undo: Path, image: Path) -> int | None:
    """Write back into ``image`` every run of bytes ``undo`` saved; how many keys it
    held. None, having written nothing, when the file is one to leave to e2undo."""
    with open(undo, "rb") as f:
        data = f.read()
    if len(data) < HEADER.size or data[:8] != MAGIC:
        return None
    (_, nkeys, super_blk, key_blk, bs, fs_bs, _, state, compat, incompat, _, _, fs_off) = (
        HEADER.unpack_from(data)
    )
    if not state & STATE_FINISHED or incompat or not bs or not fs_bs:
        return None
    offset = fs_off if compat & COMPAT_FS_OFFSET else 0
    writes: list[tuple[int, bytes]] = []
    per_block = bs // KEY.size - 1
    blk = key_blk
    for first in range(0, nkeys, per_block):
        kb = blk * bs
        if len(data) < kb + bs or struct.unpack_from("<I", data, kb)[0] != KEYBLOCK_MAGIC:
            return None
        blk += 1
        for j in range(min(per_block, nkeys - first)):
            fsblk, _, size = KEY.unpack_from(data, kb + KEYBLOCK_HEAD + j * KEY.size)
            start = blk * bs
            if len(data) < start + size:
                return None
            writes.append((fsblk * fs_bs + offset, data[start : start + size]))
            blk += -(-size // bs)
    fd = os.open(image, os.O_RDWR)
    try:
        # e2undo's own safety check: the undo file is for this image as e2fsck left it.
        sb = bytearray(data[super_blk * bs : super_blk * bs + SUPERBLOCK_SIZE])
        sb[56:58] = bytes(b ^ 0xFF for b in sb[56:58])  # s_magic is stored inverted
        if os.pread(fd, SUPERBLOCK_SIZE, offset + SUPERBLOCK_OFFSET) != bytes(sb):
            return None
        for pos, chunk in writes:
            os.pwrite(fd, chunk, pos)
    finally:
        os.close(fd)
    return int(nkeys)
