"""Rule 18, the ordered-metadata profile: namespace ops persist in the order they ran."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ops import parent

if TYPE_CHECKING:
    from .namespace import Inode, Model


class Ordering:
    """Rule 18: on the ordered-metadata profile a namespace op (create, link, unlink,
    rename, mkdir, rmdir, symlink) is durable once a file or directory changed after it
    is fsync'd: one journal commits in order, so the commit that makes the fsync'd
    inode's last change durable makes every earlier one durable too."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, str, str, Inode | None]] = []
        self.inode_at: dict[int, int] = {}  # an inode -> the op that last changed it
        self.dir_at: dict[str, int] = {}  # a directory -> the op that last changed its entries

    def after(self, model: Model, paths: set[str], inodes: set[int]) -> None:
        """Note what the op just applied (which changed ``paths`` and ``inodes``) did."""
        for ino in inodes:
            self.inode_at[ino] = model.ops
        for p in paths:
            self.dir_at[parent(p)] = model.ops
            if p in model.files:
                self.pending.append((model.ops, "name", p, model.files[p]))
            elif p in model.dirs:
                self.dir_at[p] = model.ops
                self.pending.append((model.ops, "dir", p, None))
            elif p in model.removed:
                self.pending.append((model.ops, "gone", p, None))

    def persist(self, model: Model, horizon: int) -> None:
        """Every namespace op up to op ``horizon`` is durable (those since undone by a
        later op no longer name what they made, and are passed over)."""
        keep = []
        for entry in self.pending:
            i, kind, p, inode = entry
            if i > horizon:
                keep.append(entry)
            elif kind == "name" and model.files.get(p) is inode:
                model.file_name_durable[p] = True
            elif kind == "dir" and p in model.dirs:
                model.dirs[p] = True
            elif kind == "gone" and p in model.removed:
                model.removed.discard(p)
                model.gone.add(p)
        self.pending = keep
