"""Recovery time at scale (kind ``recovery``): how long each recovery path takes after a
real crash, against size, population and mkfs features (seeds 002 and 004).

Per item (cell x size x repetition x crash method):

1. a sparse disk image of the size; a fresh guest makes the filesystem, populates it
   (``harness/guest/recoveryload.py``: seeded small files and directories, a fill by
   fallocate) and records what the filesystem reports (files, dirs, inodes and blocks
   used); then it starts a metadata-heavy churn (creates, renames, unlinks, fsyncs)
   and the harness **SIGKILLs QEMU** while it runs: the disk image is the crash state.
   With ``crash.methods`` naming ``dm-log-writes`` too, the same guest first runs the
   same population and churn on a dm-log-writes disk and the host replays its log up to
   a mark taken while the churn ran: a second crash state of the same workload, an item
   of its own (``method`` in the table; ``recovery_crash.py``);
2. ext only, on the host: ``e2fsck -f -y -tt`` on a sparse copy of the crash state --
   the userspace recovery (journal replay and every pass; for ext2 the only one);
3. a fresh guest mounts the crash state(s): the kernel's own journal/log replay, timed;
   then umount, timed;
4. on the host: the full read-only check of the recovered image (``e2fsck -f -n -tt``,
   ``xfs_repair -n``, ``btrfs check --readonly``), timed.

Every phase's seconds, the e2fsck pass times and counts, and the population go into one
``observations`` row per item; ``scenario results table recovery --by fs,features,size``
reads them next to the crash-replay recovery times. Verdict: the read-only check after
recovery must be clean. A filesystem without a journal (ext2, ``^has_journal``) is
expected to need its fsck after a crash: that is the seed's claim, not a finding, so it is
kept out of the counts (and said in the summary).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.check import timed
from harness.check.host import host_check
from harness.config.crash import journaled as fs_journaled
from harness.config.settings import size_text
from harness.errors import GuestPanic, GuestTimeout, HarnessError
from harness.experiments import lifecycle
from harness.experiments.recovery.crash import SERIALS, Target, guest_spec, make_states, program
from harness.experiments.recovery.settings import Cell, RecoveryScenario, preflight
from harness.model import contract
from harness.outcome import Outcome, expected_without_journal
from harness.record import recorder as record
from harness.report.recovery_fit import claims, fits
from harness.store.model import ItemOutcome
from harness.vm.backend import Disk, start_guest


@dataclass(frozen=True)
class Item:
    cell: Cell
    size: int
    repetition: int
    method: str = "sigkill"

    @property
    def base(self) -> str:
        """The crash this item's state comes from (shared by its methods)."""
        return f"{self.cell.name()} @{size_text(self.size)} #{self.repetition}"

    @property
    def id(self) -> str:
        return self.base if self.method == "sigkill" else f"{self.base} {self.method}"

    def key(self) -> dict[str, Any]:
        """The grouping keys stored with the item (``cell`` of the observation)."""
        name = self.cell.name()
        return {
            "fs": self.cell.fs,
            "features": self.cell.feature_text(),
            "mount_options": ",".join(self.cell.mount_options) or "defaults",
            # a line of its own in fits and plots
            "cell": name if self.method == "sigkill" else f"{name} ({self.method})",
            "method": self.method,
            "size": self.size / (1 << 30),  # GiB: sorts and fits as a number
            "repetition": self.repetition,
        }

    def journaled(self) -> bool:
        return fs_journaled(self.cell.fs, self.cell.features)


class Recovery(lifecycle.Observed):
    """One item per cell, size, repetition and crash method; see the module docstring."""

    @classmethod
    def preflight(cls, sc: Any) -> None:
        assert isinstance(sc, RecoveryScenario)
        preflight(sc)

    def prepare(self) -> None:
        assert isinstance(self.sc, RecoveryScenario)
        self.all = [
            Item(cell, size, rep, method)
            for size in self.sc.sizes
            for cell in self.sc.filesystems
            for rep in range(self.sc.repeat)
            for method in self.sc.crash.methods
        ]

    def items(self) -> Sequence[Item]:
        return self.all

    def check(self, todo: Sequence[lifecycle.Item]) -> Iterator[tuple[Item, dict[str, Any]]]:
        # The methods of one crash share its guests: measured together, yielded apiece.
        crashes: dict[str, list[Item]] = {}
        for it in todo:
            if isinstance(it, Item):
                crashes.setdefault(it.base, []).append(it)
        n = 0
        for base, group in crashes.items():
            self.run.progress(f"recovery: {base}", n, len(todo))
            results = self.measure(group)
            for it in group:
                yield it, results[it.method]
                n += 1

    def commit(self, item: lifecycle.Item, result: Any) -> None:
        assert isinstance(item, Item)
        self.run.store.record_observation(
            self.run.run_id, item.id, item.key(), result, Outcome(result["outcome"])
        )

    def expected(self, item: ItemOutcome) -> bool:
        # a journal-less fs that needed its fsck: the seed's claim, not a finding
        cell = item.detail.get("cell", {})
        journaled = fs_journaled(str(cell.get("fs")), str(cell.get("features", "")))
        return expected_without_journal(item.outcome, journaled)

    def summary(self) -> dict[str, Any]:
        obs = self.run.store.observations(self.run.run_id)
        return {"items": len(obs), "fits": fits(obs), "claims": claims(obs)}

    # -- one crash, every method ------------------------------------------------------------
    def measure(self, group: Sequence[Item]) -> dict[str, dict[str, Any]]:
        """Crash states by every method of ``group``, then every recovery path of each; a
        hang or a panic is the harness outcome of every method, the images are deleted
        however it ends. Method -> metrics."""
        sc, it = self.sc, group[0]
        work = self.run.dir / re.sub(r"[^A-Za-z0-9_.@#-]+", "_", it.base)
        work.mkdir(parents=True, exist_ok=True)
        images = {g.method: work / f"crash-{g.method}.raw" for g in group}
        for image in images.values():
            with open(image, "wb") as f:
                f.truncate(it.size)
        started = time.monotonic()
        ms: dict[str, dict[str, Any]] = {g.method: {"phases": {}} for g in group}
        target = Target(it.cell, it.size, self.run.seed + it.repetition, self.run.seed, it.base)
        try:
            make_states(sc, target, images, work, ms)
            if it.cell.fs in timed.EXT:
                for method, image in images.items():
                    rep, copy_s = timed.full_repair_copy(image, work, timeout=sc.timeout)
                    ms[method]["phases"]["repair"] = rep.seconds
                    ms[method]["repair"] = rep.to_json() | {"copy_seconds": round(copy_s, 3)}
            self._replay(it, images, ms)
            for method, image in images.items():
                m = ms[method]
                if m["replay"]["mount"]["rc"] == 0:
                    fsck = timed.full_check(it.cell.fs, image, timeout=sc.timeout)
                    m["phases"]["fsck"] = fsck.seconds
                    m["fsck"] = fsck.to_json()
                m |= self._verdict(it, image, work, m)
        except (GuestTimeout, GuestPanic) as e:
            kind = Outcome.TIMEOUT if isinstance(e, GuestTimeout) else Outcome.PANIC
            failed = {"outcome": str(kind), "error": e.message, "console": e.console[-1500:]}
            _fail_the_rest(ms, failed)
        except HarnessError as e:
            failed = {"outcome": str(Outcome.HARNESS_ERROR), "error": e.message,
                      "detail": (e.detail or "")[-1500:]}  # fmt: skip
            _fail_the_rest(ms, failed)
        finally:
            for image in images.values():
                image.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                work.rmdir()
        for m in ms.values():
            # the guests are shared: this is the wall time of every method of the crash
            m["item_seconds"] = round(time.monotonic() - started, 2)
            m["methods_measured"] = len(ms)
        return ms

    def _replay(self, it: Item, images: Mapping[str, Path], ms: dict[str, dict[str, Any]]) -> None:
        """The kernel's recovery: mount each crash state in one fresh guest."""
        disks = [Disk(image, SERIALS[method]) for method, image in images.items()]
        with start_guest(guest_spec(self.sc, disks)) as g:
            boot = round(g.boot_seconds(), 2)
            record.install_scripts(g)
            for method in images:
                args = ["--dev", g.disk(SERIALS[method]), "--fs", it.cell.fs]
                args += ["--mount-opts", ",".join(it.cell.mount_options)]
                args += ["--timeout", str(self.sc.timeout)]
                facts = program(g, contract.Replayed, "replay", args, self.sc.timeout + 60)
                if facts.disk_errors:  # the host's file failed: no recovery measured
                    raise HarnessError(
                        "a disk failed under the recovery (the host's file, not the filesystem)",
                        detail="\n".join(facts.disk_errors),
                    )
                m = ms[method]
                m["replay_boot_seconds"] = boot
                m["replay"] = facts.to_dict()
                if facts.before_mount is not None:
                    m["phases"]["log_replay"] = facts.before_mount.seconds
                if facts.mount.rc == 0:  # a refused mount recovered nothing
                    m["phases"]["mount"] = facts.mount.seconds
                if facts.umount is not None:
                    m["phases"]["umount"] = facts.umount.seconds
                if facts.usage is not None:
                    m["recovered"] = facts.usage.to_dict()

    def _verdict(self, it: Item, image: Path, work: Path, m: dict[str, Any]) -> dict[str, Any]:
        if m["replay"]["mount"]["rc"] != 0:
            return {"outcome": str(Outcome.MOUNT_FAILED)}
        if m["fsck"]["rc"] == 0:
            return {"outcome": str(Outcome.CONSISTENT)}
        if "repair" in m:
            fixed = m["repair"]["rc"] is not None and m["repair"]["rc"] < 4
            outcome = Outcome.REPAIRED if fixed else Outcome.UNREPAIRABLE
        else:
            outcome = host_check(it.cell.fs, image, work, timeout=self.sc.timeout).outcome
        expected = expected_without_journal(outcome, it.journaled())
        return {"outcome": str(outcome), "expected": expected}


def _fail_the_rest(ms: Mapping[str, dict[str, Any]], failed: Mapping[str, Any]) -> None:
    """A harness failure is the outcome of every method not judged before it."""
    for m in ms.values():
        if "outcome" not in m:
            m |= failed
