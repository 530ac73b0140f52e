"""What a block is, as every filesystem's explainer names it (``ext``/``xfs``/``btrfs``
through ``blocks.py``): one record, so the report prints them all alike."""

from __future__ import annotations

from dataclasses import dataclass

from harness.record.logwrites import Entry


@dataclass(frozen=True)
class What:
    """What one block is: a kind, the thing it belongs to, and where in it."""

    kind: str  # superblock, inode table, journal, directory, file data, free, ...
    subject: str = ""  # group 3, transaction 6, /d5/f8 ...
    offset: int | None = None  # bytes into the file or directory
    detail: str = ""  # inodes of an inode-table block; what a journal copy is of
    source: str = ""  # where ownership was found when not in the state itself


@dataclass(frozen=True)
class Explained:
    entry: Entry
    blocks: tuple[tuple[int, What], ...]  # (block number, what it is)
