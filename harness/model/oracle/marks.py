"""What each mark requires: the recorder settles a mark's requirements at the next one,
and the weaker profiles' floors label them (rules 2-5 and the profiles)."""

from __future__ import annotations

import time
from typing import Any

from ..ops import ENDS
from .namespace import Model
from .stamps import Stamps

FORMAT = "crashlab-oracle/2"
MARK_PREFIX = "crashlab:sync:"  # + n: the mark placed after the n-th persistence op
# Marks after the workload's final sync: nothing happens between them and it.
AFTER_FINAL = ("crashlab:umount", "dm-log-writes-end")


class Recorder:
    """Keeps the marks; each mark's interval requirements are settled at the next one."""

    def __init__(self) -> None:
        self.marks: list[dict[str, Any]] = []
        self._pending: dict[str, Any] | None = None
        self._paths: set[str] = set()
        self._inodes: set[int] = set()
        self._appended: set[int] = set()  # inodes appended to in this interval ...
        self._other: set[int] = set()  # ... and inodes changed any other way
        self._either: dict[str, tuple[list[str], set[int]]] = {}

    def touch(self, op: Any, paths: set[str], inodes: set[int], append: bool) -> None:
        """Record what ``op`` changes (before the model applies it); ``append``: it
        writes only past the file's end (``Model.appends``)."""
        for path in [p for p, (_, i) in self._either.items() if p in paths or i & inodes]:
            del self._either[path]  # touched again after the rename: rule 5 no longer holds
        if self._pending is not None and op.kind == "rename":
            self._rename_over(op, self._pending["files"])
        self._paths |= paths
        self._inodes |= inodes
        (self._appended if append else self._other).update(inodes)

    def _rename_over(self, op: Any, files: dict[str, dict[str, Any]]) -> None:
        """Rule 5: both names durable at the mark and untouched since."""
        src, dst = files.get(op.path), files.get(op.dst)
        if src is None or dst is None or {op.path, op.dst} & self._paths:
            return
        if "symlink" in src or "symlink" in dst:
            return  # a link's target is not a digest: no either-or of links (conservative)
        inodes = {src["ino"], dst["ino"]}
        if not inodes & self._inodes:
            self._either[op.dst] = (sorted({dst["sha256"], src["sha256"]}), inodes)

    def settle(self) -> None:
        """Close the pending mark: split what was touched since out of its requirements."""
        entry = self._pending
        if entry is None:
            return
        kept: dict[str, Any] = {}
        touched: dict[str, Any] = {}
        prefixes: dict[str, Any] = {}
        for path, req in sorted(entry.pop("files").items()):
            ino = req.pop("ino")
            if path not in self._paths and ino not in self._inodes:
                kept[path] = req
                continue
            touched[path] = req
            if ino in self._appended and ino not in self._other:  # rule 4
                prefixes[path] = {"sha256": req["sha256"], "size": req["size"]}
        absent = entry.pop("absent")
        entry["files"] = kept
        entry["prefixes"] = prefixes
        entry["either"] = {p: shas for p, (shas, _) in self._either.items()}
        entry["absent"] = [n for n in absent if n not in self._paths]
        # Rule 3: a state cut exactly at the mark holds none of the interval's changes.
        entry["exact"] = {"files": touched, "absent": [n for n in absent if n in self._paths]}
        entry["dirs"] = [d for d in entry["dirs"] if d not in self._paths]
        if "named" in entry:
            entry["named"] = [n for n in entry["named"] if n not in self._paths]
        if "dir_times" in entry:  # rule 20: as the directories themselves
            entry["dir_times"] = {
                d: t for d, t in entry["dir_times"].items() if d not in self._paths
            }
        self.marks.append(entry)
        self._pending = None

    @property
    def pending(self) -> dict[str, Any] | None:
        return self._pending

    @property
    def placed(self) -> int:
        """How many marks are placed (the pending one counted): a call starting now runs
        in the interval after the last of them."""
        return len(self.marks) + (self._pending is not None)

    def late(self, since: int, names: set[str]) -> None:
        """A call that started in the interval after mark ``since`` returned only now,
        several marks later (processes racing, ``guest/procs.py``): its effects may be
        in any state cut since it started, so the marks settled while it ran require
        none of the names it touched -- as rule 2 frees a mark's own interval."""
        for entry in self.marks:
            if entry["n"] < since:
                continue
            for key in ("files", "prefixes", "either", "dir_times"):
                for name in names & set(entry.get(key, {})):
                    del entry[key][name]
            for key in ("absent", "dirs", "named"):
                if key in entry:
                    entry[key] = [n for n in entry[key] if n not in names]

    def mark(self, model: Model, text: str, after_op: int) -> None:
        self.settle()
        self._pending = {
            "mark": text,
            "n": len(self.marks) + 1,
            "after_op": after_op,
            "files": model.durable_files(),
            "dirs": model.durable_dirs(),
            "absent": model.durable_absent(),
        }
        if named := model.durable_named():  # a log flush's names (oracles before it: none)
            self._pending["named"] = named
        self._paths, self._inodes = set(), set()
        self._appended, self._other = set(), set()
        self._either = {}


# The promises a run is judged by: POSIX alone (fsync makes a file's data durable, a
# directory's fsync or sync its names), or the journaled filesystems' (ext3/ext4 with a
# journal, xfs, btrfs, jfs, f2fs, reiserfs): fsync also makes the name it was called
# through durable and commits the whole inode (rules 1, 8, 10, 14, 15).
PROFILES = ("posix", "fsync-names", "ordered-metadata")


def profile_of(fsync_names: bool, ordered: bool = False) -> str:
    return PROFILES[0] if not fsync_names else PROFILES[1 + ordered]


class Floor:
    """What a weaker profile requires at each mark, beside a stronger profile's model: a
    failed requirement the floor also makes broke the weaker promise too."""

    def __init__(self, profile: str) -> None:
        self.profile = profile
        self.model = Model(fsync_names=profile != "posix")
        self.rec = Recorder()

    def touch(self, op: Any) -> None:
        paths, inodes = self.model.touches(op)
        self.rec.touch(op, paths, inodes, self.model.appends(op))

    def label(self, marks: list[dict[str, Any]]) -> None:
        """Give each of the stronger profile's ``marks`` the names this profile requires
        there (``floors[profile]``: and ``exact``, when cut exactly at it)."""
        self.rec.settle()
        for entry, low in zip(marks, self.rec.marks, strict=True):
            names = {*low["files"], *low["prefixes"], *low["either"], *low["absent"]}
            names |= set(low.get("named", []))
            names |= {d + "/" for d in low["dirs"]}
            exact = sorted({*low["exact"]["files"], *low["exact"]["absent"]})
            entry.setdefault("floors", {})[self.profile] = {"names": sorted(names), "exact": exact}


def floors(profile: str) -> list[Floor]:
    """The weaker profiles' floors of a run judged by ``profile``."""
    return [Floor(p) for p in PROFILES[: PROFILES.index(profile)]]


class Tracker:
    """A run's model and recorder, with the weaker profiles' floors beside them: what
    ``opgen.execute`` tells of every op, and the marks it returns."""

    def __init__(self, fsync_names: bool, ordered: bool = False, root: str | None = None) -> None:
        self.profile = profile_of(fsync_names, ordered)
        self.model = Model(fsync_names, ordered)
        self.rec = Recorder()
        self.lower = floors(self.profile)
        # Rule 20 reads times off the filesystem the ops run on (``root``): without
        # one (fstests' generator, triage's models) no mark requires a time.
        self.stamps = Stamps(root) if root is not None else None
        self._last: Any = None

    def before(self, op: Any) -> None:
        """``op`` is about to run: what it touches leaves the open interval's requirements."""
        if self.stamps is not None:
            self.stamps.before(self.model, op)
            if op.kind in ENDS:  # nothing can be read after a shutdown
                self.stamps.read_ahead(self.model, op)
        paths, inodes = self.model.touches(op)
        self.rec.touch(op, paths, inodes, self.model.appends(op))
        for floor in self.lower:
            floor.touch(op)

    def after(self, op: Any) -> None:
        self._last = op
        self.model.apply(op)
        for floor in self.lower:
            floor.model.apply(op)

    def next_mark(self) -> str:
        return f"{MARK_PREFIX}{self.rec.placed + 1}"

    def late(self, op: Any, since: int) -> None:
        """``op`` is about to be recorded, having started after mark ``since`` (see
        ``Recorder.late``): call before ``before``, while the model holds what it read."""
        if since >= self.rec.placed:
            return  # no mark was placed while it ran
        paths, inodes = self.model.touches(op)
        self.rec.late(since, paths | {p for p, i in self.model.files.items() if i.ino in inodes})

    def mark(self, text: str, after_op: int) -> None:
        if self.stamps is not None:
            self.stamps.mark(self.model, self._last)
            if self.rec.pending is not None:  # its interval closes now (rule 20's bound)
                self.rec.pending["until"] = self.stamps.clock
        self.rec.mark(self.model, text, after_op)
        if self.stamps is not None and self.rec.pending is not None:
            self.stamps.attach(self.rec.pending)
        for floor in self.lower:
            floor.rec.mark(floor.model, text, after_op)

    def marks(self) -> list[dict[str, Any]]:
        """Every mark's requirements, settled, each labelled with its floors."""
        if self.rec.pending is not None and "clock" in self.rec.pending:
            # The last interval runs to the workload's end (an op that failed, or none).
            self.rec.pending["until"] = time.time_ns()
        self.rec.settle()
        for floor in self.lower:
            floor.label(self.rec.marks)
        return self.rec.marks
