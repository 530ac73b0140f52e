"""fio's blocks judged by data (stdlib only: the guest checks a state with it, the host
reads what a mark requires).

The recorder splits the fio job into sections (``harness/record/fiojob.py``): section k
writes its own slice of one file, every block exactly once, with fio's verify header
(``verify=md5``), then fsyncs, and only then is mark ``crashlab:sync:<k>`` placed. Rule 12
of docs/verdicts.md: a state whose last mark is k must hold every block of sections
1..k as fio wrote it (POSIX fsync: the file's data is durable once fsync returned). The
blocks of later sections are not required; what they hold is counted, never judged.

A block is fio's own when it has fio's magic, a header whose crc32c holds, the block's
own offset in the header, and its data's md5 in the header -- what fio's own
``--verify_only`` checks, read here without fio so that a crash state is never written
to (fio lays files out before it verifies them) and every block gets a class:

- ``valid``: fio's block for that offset;
- ``zero``: all NUL bytes -- what the file held before fio wrote there (fio's layout
  allocates without writing data);
- ``eof``: past the end of the file (or the file is not there);
- ``other``: neither -- a block torn between old and new, or bytes of something else.

Nothing here promises more about ``other`` than the rules do: in a block that is not
required it is a measurement (a write in flight may tear), in a required one it is lost
data like ``zero``.
"""

from __future__ import annotations

import hashlib
import os
import struct
from typing import Any

from . import contract

MAGIC = 0xACCA
VERIFY_MD5 = 2  # fio's verify.h: VERIFY_NONE, VERIFY_HDR_ONLY, VERIFY_MD5, ...
# struct verify_header: magic, verify_type, len, rand_seed, offset, time_sec, time_nsec,
# thread, numberio, crc32 (crc32c of the 36 bytes before it), then the md5 digest.
HEADER = struct.Struct("<HHIQQIIHHI")
MD5_END = HEADER.size + 16
AFTER_FINAL = ("crashlab:umount", "dm-log-writes-end")
CLASSES = ("valid", "zero", "eof", "other")
SHOWN = 8  # blocks named per class in the report; the counts are complete


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """fio's header checksum: CRC-32C (Castagnoli) as fio's ``crc32c_sw`` computes it --
    initial value ~0 and *no* final inversion; short inputs only (pure Python)."""
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c


def classify(block: bytes, offset: int, bs: int) -> str:
    """One block of the file at ``offset``: ``valid``, ``zero``, ``eof`` or ``other``."""
    if len(block) < bs:
        return "eof"
    if block.count(0) == bs:
        return "zero"
    magic, vtype, length, _, hoff, *_rest, crc = HEADER.unpack_from(block)
    if (
        magic == MAGIC
        and vtype == VERIFY_MD5
        and length == bs
        and hoff == offset
        and crc32c(block[: HEADER.size - 4]) == crc
        and hashlib.md5(block[MD5_END:]).digest() == block[HEADER.size : MD5_END]
    ):
        return "valid"
    return "other"


def requirements(oracle: dict[str, Any], mark: str | None) -> int | None:
    """How many sections a state whose last mark is ``mark`` must hold whole (None: the
    mark requires nothing, e.g. ``crashlab:mkfs``). Exactness does not matter: a block
    is written once, so nothing after a mark changes a required block."""
    if mark in AFTER_FINAL:
        mark = oracle["final_mark"]
    return next((int(m["sections"]) for m in oracle["marks"] if m["mark"] == mark), None)


def blocks(path: str, count: int, bs: int) -> list[str]:
    """The class of each of the first ``count`` blocks of the file at ``path``."""
    if not os.path.isfile(path):
        return ["eof"] * count
    out = []
    with open(path, "rb") as f:
        for i in range(count):
            out.append(classify(f.read(bs), i * bs, bs))
    return out


def verify(
    root: str, oracle: dict[str, Any], mark: str | None, exact: bool = False
) -> contract.Verdict:
    """Check what ``mark`` requires of the fio file under ``root``: a verdict as
    ``oracle.verify``'s, with ``blocks``: per class, how many required and how many
    free blocks are in it."""
    fio = oracle["fio"]
    bs, per = int(fio["bs"]), int(fio["section_size"]) // int(fio["bs"])
    need = requirements(oracle, mark)
    required = per * (need or 0)
    path = os.path.join(root, fio["file"])
    exists = os.path.isfile(path)
    classes = blocks(path, per * int(fio["sections"]), bs)
    counts = {
        part: {c: sum(1 for x in span if x == c) for c in CLASSES}
        for part, span in (("required", classes[:required]), ("free", classes[required:]))
    }
    lost = [(i * bs, c) for i, c in enumerate(classes[:required]) if c != "valid"]
    # The file's name is promised only where fsync persists it (journaled filesystems):
    # elsewhere a missing file is not a loss the rules can call.
    judged = exists or bool(fio["fsync_names"])
    missing = [] if exists or not required or not judged else [fio["file"]]
    mismatched = (
        [contract.Mismatch(path=fio["file"], offset=off, holds=c) for off, c in lost[:SHOWN]]
        if exists and judged
        else []
    )
    return contract.Verdict(
        mark=mark,
        exact=exact,
        known=need is not None,
        checked=required,
        missing=missing,
        mismatched=mismatched,
        blocks=counts,
        lost_blocks=len(lost) if judged else 0,
        ok=not (missing or mismatched),
    )
