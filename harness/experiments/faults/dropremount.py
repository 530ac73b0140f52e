"""flakey-drop-remount (kind ``faults``): fstests' drop-and-remount crash model, cross-
checked against crash replay.

Per filesystem (a cell) and seeded sync point K of the op workload: in a guest, the disk
sits on dm-flakey; the workload runs and, the moment its K-th sync call returns, the
device starts dropping writes; the workload finishes, the filesystem is unmounted, the
device restored, mounted again and checked against the oracle as a state cut exactly
at mark K (``harness/guest/dropremount.py``). That is one crash model.

The other is the lab's own: the same seeded workload recorded on dm-log-writes, the
state cut exactly at mark K, replayed and checked like any crash state
(``harness/crashstate/``). Two independent models of "power failed right
after the K-th fsync returned" must agree; a different verdict is stored as a lab
inconsistency beside both verdicts (never in place of a finding: the item's outcome is
the worse of the two).

The drop points are drawn with the run's seed from the workload's sync points, which
the host knows before any guest boots by running the same seeded generator in a
scratch directory (``sync_points``); ``drop_at`` names them instead.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faults.dm import healthy_table_args
from harness.check import guest as guestcheck
from harness.check.host import CheckResult
from harness.config import crash as crashcfg
from harness.config import workloads
from harness.crashstate import onelog, recording
from harness.errors import HarnessError, InputError
from harness.experiments import lifecycle
from harness.experiments.faults.experiment import Cell, FsyncEio
from harness.experiments.faults.settings import FaultsScenario, FsCell
from harness.model import contract, generate
from harness.model.ops import PERSIST_OPS
from harness.outcome import Outcome, is_harness, reduce
from harness.record import guestmsg, logwrites
from harness.replay import crashstates
from harness.vm.backend import Guest


@dataclass(frozen=True)
class DropPoint:
    cell: FsCell
    index: int  # the cell's position in the scenario (its disk and replay directory)
    at: int  # the sync point: writes are dropped from the return of the at-th sync on

    @property
    def id(self) -> str:
        return f"{self.cell.name()} @sync:{self.at}"


def sync_points(workload: workloads.OpsWorkload, seed: int) -> int:
    """How many sync calls (marks) the seeded workload makes: its ops drawn on the host
    as the guest draws them, and the final sync."""
    ops = generate.draw(seed, workload.ops, workload.files, workload.max_size,
                        extended=False, fsync_names=bool(workload.fsync_names))  # fmt: skip
    return sum(op.kind in PERSIST_OPS for op in ops) + 1


def _scratch() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


def drop_points(sc: FaultsScenario, seed: int) -> list[int]:
    """The scenario's sync points: ``drop_at``, or ``drops`` of them drawn with ``seed``.

    :raise InputError: a ``drop_at`` point past the workload's last sync.
    """
    total = sync_points(sc.workload, seed)
    if sc.drop_at:
        late = [k for k in sc.drop_at if k > total]
        if late:
            raise InputError(
                f"{sc.path}: key 'drop_at' = {list(sc.drop_at)}: sync point {late[0]} is "
                f"outside the workload, which makes {total} sync calls with seed {seed}",
                hint=f"choose points from 1 to {total}, or raise workload.ops",
            )
        return sorted(set(sc.drop_at))
    return sorted(random.Random(seed).sample(range(1, total + 1), min(sc.drops, total)))


class DropRemount(FsyncEio):
    """Items are (filesystem, sync point); see the module docstring."""

    def prepare(self) -> None:
        assert isinstance(self.sc, FaultsScenario)
        self.points = drop_points(self.sc, self.run.seed)
        self.drops = [
            DropPoint(cell, i, k) for i, cell in enumerate(self.sc.filesystems) for k in self.points
        ]
        self.rows: dict[str, dict[str, Any]] = {}

    def items(self) -> Sequence[DropPoint]:  # type: ignore[override]
        return self.drops

    def check(  # type: ignore[override]
        self, todo: Sequence[lifecycle.Item]
    ) -> Iterator[tuple[DropPoint, dict[str, Any]]]:
        todo_points = [p for p in todo if isinstance(p, DropPoint)]
        for i, cell in enumerate(self.sc.filesystems):
            points = [p for p in todo_points if p.index == i]
            if not points:
                continue
            self.run.progress(f"drop-remount: {cell.name()}", i, len(self.sc.filesystems))
            rsc = self.sc.replay_twin(cell, self.run.seed)
            dropped = self._drop(cell, rsc, points)
            replayed = self._replay(rsc, i, points) if self.sc.cross_check else {}
            for p in points:
                yield p, combine(dropped[p.at], replayed.get(p.at))

    def _drop(
        self, cell: FsCell, rsc: crashcfg.Scenario, points: list[DropPoint]
    ) -> dict[int, dict[str, Any]]:
        """The drop-and-remount model for ``points`` of one cell, in one fresh guest."""
        self._points, self._rsc = points, rsc
        try:
            facts = self._probe(Cell(cell))
        except HarnessError as e:  # this cell's points only: the other cells go on
            text = e.excerpt(1500)
            facts = {"outcome": str(Outcome.HARNESS_ERROR), "error": text}
        if "outcome" in facts:  # the guest hung or panicked: every point shares its fate
            return {p.at: facts for p in points}
        result: contract.DropResult = facts["points"]
        return {f.at: judge_drop(f) for f in result.points}

    def probe(self, g: Guest, fs: FsCell, devs: list[str]) -> dict[str, Any]:
        sc, rsc = self.sc, self._rsc
        sectors = sc.disk_size // 512
        table = " ".join
        w = rsc.workload
        assert isinstance(w, workloads.OpsWorkload)
        args = [
            "--fs", str(rsc.fs.type),
            "--mkfs", json.dumps(rsc.fs.mkfs_argv("")[:-1]),
            "--mount-opts", ",".join(rsc.fs.all_mount_options()),
            "--healthy", table(["0", str(sectors), "flakey", *healthy_table_args(devs[0])]),
            "--faulty", table(["0", str(sectors), "flakey", *sc.fault.fault().table_args(devs[0])]),
            "--workload", json.dumps({"seed": self.run.seed, **w.model_dump()}),
            "--at", ",".join(str(p.at) for p in self._points),
            "--timeout", str(max(sc.timeout, 300.0)),
        ]  # fmt: skip
        r = g.run(
            ["python3", "/tmp/crashlab/dropremount.py", *args],
            timeout=self.guest_timeout(),
        )
        if not r.ok:
            detail = (r.err or r.out)[-2000:]
            raise HarnessError("dropremount.py failed in the guest", detail=detail)
        return {"points": guestmsg.read(contract.DropResult, "dropremount.py", r.out)}

    def guest_timeout(self) -> float:
        return float(max(self.sc.timeout, 300.0) * 8 * max(1, len(getattr(self, "_points", ()))))

    def _replay(
        self, rsc: crashcfg.Scenario, index: int, points: list[DropPoint]
    ) -> dict[int, dict[str, Any]]:
        """The crash-replay verdict of the state cut exactly at each point's mark."""
        rdir = self.run.dir / f"replay-{index}"
        want = {f"{crashstates.SYNC_MARK_PREFIX}{p.at}": p.at for p in points}
        out: dict[int, dict[str, Any]] = {}
        try:
            meta, oracle = recording.recorded(rsc, rdir, self.run.seed, self.run.progress)
            with logwrites.open_log(rdir / "log.raw") as lg:
                states = [
                    s for s in crashstates.at_marks(lg, self.run.seed) if s.mark in want and s.exact
                ]
                size = int(meta["device_size"])
                for state, results, *_ in onelog.check_states(
                    rsc, lg, rsc.fs, oracle, states, size, rdir, self.run.progress
                ):
                    assert state.mark is not None
                    out[want[state.mark]] = _verdict(results, state.id)
        except HarnessError as e:
            text = e.excerpt(1500)
            return {p.at: {"outcome": str(Outcome.HARNESS_ERROR), "error": text} for p in points}
        for p in points:  # a mark the recording never reached (the workload failed there)
            out.setdefault(p.at, {"outcome": str(Outcome.HARNESS_ERROR), "error": "no such mark"})
        return out

    def summary(self) -> dict[str, Any]:
        obs = self.run.store.observations(self.run.run_id)
        agree = {o["item"]: o["metrics"].get("agree") for o in obs}
        checked = {item: same for item, same in agree.items() if same is not None}
        return {
            "filesystems": len(self.sc.filesystems),
            "fault": str(self.sc.fault.mode),
            "drop_points": self.points,
            "cross_checked": len(checked),
            "agree": sum(checked.values()),
            "lab_inconsistencies": sorted(item for item, same in checked.items() if not same),
        }

    def commit(self, item: lifecycle.Item, result: Any) -> None:
        assert isinstance(item, DropPoint)
        cell = {**item.cell.model_dump(mode="json"), "name": item.cell.name(), "at": item.at}
        self.run.store.record_observation(
            self.run.run_id, item.id, cell, result, Outcome(result["outcome"])
        )


def _verdict(results: Sequence[CheckResult], state_id: str) -> dict[str, Any]:
    return {
        "outcome": str(reduce(r.outcome for r in results)),
        "state": state_id,
        "note": "; ".join(r.note for r in results if r.note)[:500],
    }


def judge_drop(facts: contract.DropPoint) -> dict[str, Any]:
    """One sync point's facts -> its verdict, by the same rules as a replayed crash state
    (``harness/check/guest.judge``); a failed setup step is the lab's."""
    if facts.failed or not facts.switched or facts.check is None:
        failed = facts.failed or "the workload never reached the sync point"
        tail = next((s.output for s in reversed(facts.steps) if s.rc != 0), "")
        return {"outcome": str(Outcome.HARNESS_ERROR), "error": f"{failed}: {tail}"[-1500:]}
    r = guestcheck.judge(facts.check)
    return {
        "outcome": str(r.outcome),
        "seconds": r.phases.get("mount"),  # the kernel's own recovery: `results table faults`
        "phases": r.phases,
        "note": r.note[:500],
        "workload": facts.workload.to_dict() if facts.workload else None,
    }


def combine(drop: dict[str, Any], replay: dict[str, Any] | None) -> dict[str, Any]:
    """Both verdicts, whether they agree, and the item's outcome: the worst of the two
    (``outcome.reduce``), so neither model's finding is hidden and a harness failure of
    either is never read as clean. Only two verdicts that both judged the filesystem are
    compared."""
    judged = [Outcome(v["outcome"]) for v in (drop, replay) if v is not None]
    findings = [o for o in judged if not is_harness(o)]
    return {
        "drop": drop,
        "replay": replay,
        "agree": findings[0] == findings[1] if len(findings) == 2 else None,
        "outcome": str(reduce(judged)),
        "seconds": drop.get("seconds"),  # the recovery mount after the drop
        "row": {
            "drop+remount": drop["outcome"],
            "crash replay": replay["outcome"] if replay else "-",
            "mount s": round(drop["seconds"], 3) if drop.get("seconds") else "-",
        },
    }
