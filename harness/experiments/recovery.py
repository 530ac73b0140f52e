"""Recovery time at scale (kind ``recovery``): how long each recovery path takes after a
real crash, against size, population and mkfs features (seeds 002 and 004).

Per item (cell x size x repetition):

1. a sparse disk image of the size; a fresh guest makes the filesystem, populates it
   (``harness/guest/recoveryload.py``: seeded small files and directories, a fill by
   fallocate) and records what the filesystem reports (files, dirs, inodes and blocks
   used); then it starts a metadata-heavy churn (creates, renames, unlinks, fsyncs)
   and the harness **SIGKILLs QEMU** while it runs: the disk image is the crash state;
2. ext only, on the host: ``e2fsck -f -y -tt`` on a sparse copy of the crash state --
   the userspace recovery (journal replay and every pass; for ext2 the only one);
3. a fresh guest mounts the crash state: the kernel's own journal/log replay, timed;
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
import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.check import timed
from harness.check.host import host_check
from harness.config.recovery import Cell, RecoveryScenario, preflight
from harness.config.settings import size_text
from harness.errors import GuestPanic, GuestTimeout, HarnessError
from harness.experiments import lifecycle
from harness.experiments.recovery_fit import claims, fits
from harness.outcome import Outcome
from harness.record import recorder as record
from harness.store.model import RunKind
from harness.vm.backend import Disk, Guest, GuestSpec, start_guest

SERIAL = "recovery"
PROGRAM = f"{record.GUEST_DIR}/recoveryload.py"


@dataclass(frozen=True)
class Item:
    cell: Cell
    size: int
    repetition: int

    @property
    def id(self) -> str:
        return f"{self.cell.name()} @{size_text(self.size)} #{self.repetition}"

    def key(self) -> dict[str, Any]:
        """The grouping keys stored with the item (``cell`` of the observation)."""
        return {
            "fs": self.cell.fs,
            "features": self.cell.feature_text(),
            "mount_options": ",".join(self.cell.mount_options) or "defaults",
            "cell": self.cell.name(),
            "size": self.size / (1 << 30),  # GiB: sorts and fits as a number
            "repetition": self.repetition,
        }

    def journaled(self) -> bool:
        return self.cell.fs not in ("ext2",) and "^has_journal" not in self.cell.features


@lifecycle.register("recovery")
class Recovery(lifecycle.Observed):
    """One item per cell, size and repetition; see the module docstring."""

    run_kind = RunKind.RECOVERY

    @classmethod
    def preflight(cls, sc: Any) -> None:
        assert isinstance(sc, RecoveryScenario)
        preflight(sc)

    def prepare(self) -> None:
        assert isinstance(self.sc, RecoveryScenario)
        self.all = [
            Item(cell, size, rep)
            for size in self.sc.sizes
            for cell in self.sc.filesystems
            for rep in range(self.sc.repeat)
        ]

    def items(self) -> Sequence[Item]:
        return self.all

    def check(self, todo: Sequence[lifecycle.Item]) -> Iterator[tuple[Item, dict[str, Any]]]:
        for n, it in enumerate(i for i in todo if isinstance(i, Item)):
            self.run.progress(f"recovery: {it.id}", n, len(todo))
            yield it, self.measure(it)

    def commit(self, item: lifecycle.Item, result: Any) -> None:
        assert isinstance(item, Item)
        self.run.store.record_observation(
            self.run.run_id, item.id, item.key(), result, Outcome(result["outcome"])
        )

    def counted(self, observation: Mapping[str, Any]) -> bool:
        # a journal-less fs that needed its fsck: the claim, not a finding
        return not observation["metrics"].get("expected")

    def summary(self) -> dict[str, Any]:
        obs = self.run.store.observations(self.run.run_id)
        return {"items": len(obs), "fits": fits(obs), "claims": claims(obs)}

    # -- one item -------------------------------------------------------------------------
    def measure(self, it: Item) -> dict[str, Any]:
        """Crash, then every recovery path; a hang or a panic is the item's harness
        outcome, the image is deleted however it ends."""
        sc = self.sc
        work = self.run.dir / re.sub(r"[^A-Za-z0-9_.@#-]+", "_", it.id)
        work.mkdir(parents=True, exist_ok=True)
        image = work / "crash.raw"
        with open(image, "wb") as f:
            f.truncate(it.size)
        started = time.monotonic()
        m: dict[str, Any] = {"phases": {}}
        try:
            self._crash(it, image, m)
            if it.cell.fs in timed.EXT:
                rep, copy_s = timed.full_repair_copy(image, work, timeout=sc.timeout)
                m["phases"]["repair"] = rep.seconds
                m["repair"] = rep.to_json() | {"copy_seconds": round(copy_s, 3)}
            self._replay(it, image, m)
            if m["replay"]["mount"]["rc"] == 0:
                fsck = timed.full_check(it.cell.fs, image, timeout=sc.timeout)
                m["phases"]["fsck"] = fsck.seconds
                m["fsck"] = fsck.to_json()
            m |= self._verdict(it, image, work, m)
        except (GuestTimeout, GuestPanic) as e:
            kind = Outcome.TIMEOUT if isinstance(e, GuestTimeout) else Outcome.PANIC
            m |= {"outcome": str(kind), "error": e.message, "console": e.console[-1500:]}
        except HarnessError as e:
            m |= {"outcome": str(Outcome.HARNESS_ERROR), "error": e.message,
                  "detail": (e.detail or "")[-1500:]}  # fmt: skip
        finally:
            image.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                work.rmdir()
        m["item_seconds"] = round(time.monotonic() - started, 2)
        return m

    def _spec(self, image: Path) -> GuestSpec:
        return GuestSpec(disks=(Disk(image, SERIAL),), command_timeout=self.sc.timeout + 120)

    def _crash(self, it: Item, image: Path, m: dict[str, Any]) -> None:
        """Make, populate, churn, SIGKILL: the image is left as the guest's crash."""
        sc, pop = self.sc, self.sc.population
        with start_guest(self._spec(image)) as g:
            m["boot_seconds"] = round(g.boot_seconds(), 2)
            record.install_scripts(g)
            dev = g.disk(SERIAL)
            facts = _program(g, "populate", [
                "--dev", dev, "--fs", it.cell.fs, "--mkfs", json.dumps(it.cell.mkfs_argv()),
                "--mount-opts", ",".join(it.cell.mount_options),
                "--seed", str(self.run.seed + it.repetition), "--files", str(pop.files),
                "--dirs", str(pop.dirs), "--file-size", str(pop.file_size),
                "--fill", str(pop.fill), "--size", str(it.size), "--timeout", str(sc.timeout),
            ], sc.timeout + 60)  # fmt: skip
            for step in ("mkfs", "mount", "fallocate"):
                if facts.get(step, {}).get("rc", 0) != 0:
                    raise HarnessError(
                        f"{step} failed in the guest for {it.id}",
                        detail=facts[step]["output"],
                    )
            m["mkfs_seconds"] = round(facts["mkfs"]["seconds"], 3)
            m["populate_seconds"] = round(facts["populate_seconds"], 3)
            m["population"] = facts["usage"]
            churn = ["--mnt", "/mnt/recovery", "--fsync-every", str(sc.crash.fsync_every)]
            pid = _program(g, "churn", [*churn, "--seed", str(self.run.seed)], 60)["pid"]
            time.sleep(sc.crash.after)
            # The churn must still be running when the plug is pulled: a crash of an idle
            # filesystem would leave nothing to recover.
            running = g.run(["kill", "-0", str(pid)], timeout=60).ok
            g.kill()
        if not running:
            raise HarnessError(f"the churn of {it.id} had stopped before the kill")
        m["crash"] = {"after_seconds": sc.crash.after, "killed": "SIGKILL", "churn_running": True}

    def _replay(self, it: Item, image: Path, m: dict[str, Any]) -> None:
        """The kernel's recovery: mount the crash state in a fresh guest."""
        with start_guest(self._spec(image)) as g:
            m["replay_boot_seconds"] = round(g.boot_seconds(), 2)
            record.install_scripts(g)
            args = ["--dev", g.disk(SERIAL), "--fs", it.cell.fs]
            args += ["--mount-opts", ",".join(it.cell.mount_options)]
            args += ["--timeout", str(self.sc.timeout)]
            facts = _program(g, "replay", args, self.sc.timeout + 60)
        m["replay"] = facts
        m["phases"]["mount"] = facts["mount"]["seconds"]
        if "umount" in facts:
            m["phases"]["umount"] = facts["umount"]["seconds"]
        if "usage" in facts:
            m["recovered"] = facts["usage"]

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
        expected = outcome is Outcome.REPAIRED and not it.journaled()
        return {"outcome": str(outcome), "expected": expected}


def _program(g: Guest, action: str, args: list[str], timeout: float) -> dict[str, Any]:
    """One action of the guest program; its JSON facts.

    :raise HarnessError: the program itself failed (never a finding).
    """
    r = g.run(["python3", PROGRAM, action, *args], timeout=timeout)
    if not r.ok:
        raise HarnessError(
            f"recoveryload.py {action} failed in the guest", detail=(r.err or r.out)[-2000:]
        )
    facts: dict[str, Any] = json.loads(r.out)
    return facts
