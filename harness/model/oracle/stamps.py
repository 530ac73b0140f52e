"""Rule 20's model side: the times each inode had when a persistence op last committed
it whole, read off the real filesystem at the mark that op placed.

The kernel sets mtime and ctime, so the model cannot compute them: the workload stats the
inodes a persistence op committed right after it returned (nothing runs in between), and
the clock at every mark bounds what any later state may show. A whole commit is sync or
syncfs (every inode), and, where fsync commits the whole inode (``fsync_names``), fsync
of a file or a directory -- never fdatasync, which promises what reading the data needs
and no more (POSIX: synchronized I/O *data* integrity completion).
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..ops import RENAMES, SPECS, SYNCED_WRITES
from .namespace import Model

Key = int | str  # a file by its inode number, a directory by its path


def committed(model: Model, op: Any) -> set[Key]:
    """The inodes ``op`` (already applied) committed whole."""
    k = SYNCED_WRITES.get(op.kind, op.kind)
    if op.kind in SPECS and SPECS[op.kind].persists in ("sync", "names"):  # and a log force
        return {i.ino for i in model.files.values()} | set(model.dirs)
    if not model.fsync_names:
        return set()
    if k == "fsync":
        return {model.files[op.path].ino}
    if k == "fsync_dir":
        return {op.path}
    if k == "fsync_fd":
        held = model.handles.get(op.fd)
        if isinstance(held, str):
            return {held}
        return {held.ino} if held is not None else set()
    return set()


class Stamps:
    """The durable (mtime, ctime) of each inode the workload committed whole, and the
    clock at the last mark."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.durable: dict[Key, dict[str, int | None]] = {}
        self.clock = 0
        self._ahead: dict[Key, dict[str, int | None]] | None = None

    def before(self, model: Model, op: Any) -> None:
        """utimes can set mtime back in time: below the durable value, which then no
        longer bounds it. A directory moved or removed leaves its key (its path)."""
        if op.kind == "utimes" and op.path in model.files:
            if (low := self.durable.get(model.files[op.path].ino)) is not None:
                low["mtime"] = None
        elif op.kind in RENAMES or op.kind in ("rmdir", "exchange"):
            moved = [p for p in (op.path, getattr(op, "dst", "")) if p and p in model.dirs]
            for key in [k for k in self.durable if isinstance(k, str)]:
                if any(key == p or key.startswith(p + "/") for p in moved):
                    del self.durable[key]

    def mark(self, model: Model, op: Any) -> None:
        """A persistence op returned and its mark is placed: read what it committed
        (read before it, for an op after which nothing can be read: ``read_ahead``)."""
        self.clock = time.time_ns()  # the kernel's coarse clock never runs ahead of it
        got, self._ahead = self._ahead, None
        self.durable.update(got if got is not None else self._read(model, op))

    def read_ahead(self, model: Model, op: Any) -> None:
        """Before a shutdown: xfs answers every stat after it with EIO. The shutdown
        changes no time, so what it commits reads the same before it."""
        self._ahead = self._read(model, op)

    def _read(self, model: Model, op: Any) -> dict[Key, dict[str, int | None]]:
        paths = {i.ino: p for p, i in sorted(model.files.items(), reverse=True)}
        out: dict[Key, dict[str, int | None]] = {}
        for key in committed(model, op):
            path = paths.get(key) if isinstance(key, int) else key
            if path is None:
                continue  # no name left: nothing can require its times
            st = os.lstat(os.path.join(self.root, path))
            out[key] = {"mtime": st.st_mtime_ns, "ctime": st.st_ctime_ns}
        return out

    def attach(self, entry: dict[str, Any]) -> None:
        """Give a new mark's requirements their times: each durable file's and
        directory's committed values (``times``, ``dir_times``) and the clock."""
        entry["clock"] = self.clock
        for req in entry["files"].values():
            if (low := self.durable.get(req["ino"])) is not None:
                req["times"] = dict(low)
        dirs = ["", *entry["dirs"]]
        entry["dir_times"] = {d: dict(t) for d in dirs if (t := self.durable.get(d))}


def untimed(doc: dict[str, Any]) -> dict[str, Any]:
    """An oracle document that checks no time: its marks without ``clock`` and ``until``
    (``verify`` holds rule 20 only with them). A copy; ``doc`` is left as it is."""
    marks = [{k: v for k, v in m.items() if k not in ("clock", "until")} for m in doc["marks"]]
    return {**doc, "marks": marks}
