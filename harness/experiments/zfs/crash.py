"""``experiment = "crash"``: crash states of a whole pool, one dm-log-writes log per vdev.

record -> multi-disk crash states -> materialise one image per disk -> import, scrub and
verify in a guest -> the store.

Record: ``harness/experiments/zfs/record.py`` (one dm-log-writes log per vdev, a common
mark after every ``zpool sync``).

States: ``replay.multicrash`` (consistent cuts at each common mark; independent cuts per
disk between two marks). Check, in a guest, never on the host kernel: each state's disk
images (copies) are attached, symlinked into a directory of their own, and
``zpool import -d DIR -f -N -R ALTROOT`` imports exactly that set; then ``zpool scrub``
+ ``zpool wait -t scrub``, ``zpool status -j --json-int``, ``zfs mount``, the oracle
(every file the last common mark requires, by sha256), ``zpool export``.

Before the guest, ``zdb -e -bcc`` reads each state's images on the host (``zdb.py``):
stored as the host-stage check, evidence beside the verdict, never deciding it.

Verdicts (harness.outcome): import refused, even with ``-F`` (rewind to an older txg),
or permanent data errors after the scrub -> ``unrepairable``; an import that needed
``-F``, or a scrub that repaired bytes or found checksum errors -> ``repaired``; a
required file missing or different -> ``data_loss``; else ``consistent``. A hang or a
panic is the lab's ``timeout``/``panic`` and the guest is replaced for the rest.

Torn sets that no power cut of honest disks leaves (``crash.torn_model = "any"``, see
harness/replay/multicrash.py) are checked like the others, but their verdicts are a disk losing
acknowledged writes, not ZFS: stored as they came out (nothing hidden), labelled
``lying-disk`` in the state's description and the check's output, kept out of the
summary's ``outcome_counts`` (they get ``lying_disk_outcome_counts``) and out of the
exit status.

Store: a run of kind ``zfs``; each vdev's log in ``logs`` (role ``vdevK``); each state in
``crash_states`` with disk 0's log hash and cut as ``log_hash``/``prefix`` and every cut in
``params`` (``MultiState.to_dict``); the guest check in ``checks``; import, scrub and
export seconds in ``recovery_times`` as ``mount``, ``fsck_after`` and ``umount``.

A killed run resumes through the lifecycle like crash replay: the recording is kept in
the run directory (``recording.json``) and states already judged are skipped. Not done
yet: incremental replay (each disk image is built from entry 0 -- cheap at
these sizes); cuts torn *inside* a disk
(reorder/torn within a log) combined with the cross-disk model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import shlex
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.check import zpool as parse
from harness.check.guest import in_guests
from harness.experiments import lifecycle
from harness.experiments.zfs import pool, zdb
from harness.experiments.zfs.record import Recording, record_pool
from harness.experiments.zfs.settings import CrashSpec, ZfsScenario
from harness.model import contract
from harness.outcome import Outcome, reduce
from harness.record import guestmsg, logwrites
from harness.record import recorder as record
from harness.replay import multicrash
from harness.replay import replayer as replay
from harness.replay.multicrash import MultiState
from harness.store import db as store
from harness.store.model import ItemOutcome
from harness.vm.backend import Disk, Guest, GuestSpec, start_guest

log = logging.getLogger("crashlab.zfs.crash")

LYING_NOTE = (
    f"[{multicrash.LYING}] this disk set needs a disk that lost acknowledged writes: "
    "its verdict is not a ZFS finding"
)
ALTROOT = "/mnt/cs"


@dataclass(frozen=True)
class StateCheck:
    outcome: Outcome
    seconds: float
    phases: dict[str, float]
    output: str
    status: parse.PoolStatus | None = None
    verify: dict[str, Any] | None = None
    zdb: zdb.ZdbCheck | None = None  # the host's read of the same images (``zdb``)

    @property
    def zdb_disagrees(self) -> bool:
        """zdb and the guest differ on whether the pool is clean."""
        return self.zdb is not None and self.zdb.ok != (self.outcome is Outcome.CONSISTENT)

    @property
    def repaired(self) -> int:
        scan = self.status.scan if self.status else None
        return scan.processed if scan else 0

    @property
    def checksum_errors(self) -> int:
        return sum(v.checksum for v in self.status.leaves()) if self.status else 0


def judge(
    imported: bool,
    status: parse.PoolStatus | None,
    mounted: bool,
    verify: dict[str, Any] | None,
    *,
    rewound: bool = False,
) -> Outcome:
    """Facts of one state's check -> its outcome. Failure is the default: only an import,
    a clean scrub and a passing oracle make a state consistent; an import that needed
    ``-F`` (rewinding txgs) is ``repaired`` at best."""
    if not imported or status is None or status.scan is None:
        return Outcome.UNREPAIRABLE
    outcomes = [Outcome.REPAIRED if rewound else Outcome.CONSISTENT]
    if status.error_count:
        outcomes.append(Outcome.UNREPAIRABLE)
    elif status.scan.processed or any(v.checksum for v in status.leaves()):
        outcomes.append(Outcome.REPAIRED)
    if not mounted:
        outcomes.append(Outcome.UNREPAIRABLE)
    elif verify is None or not verify.get("ok", False):
        outcomes.append(Outcome.DATA_LOSS)
    return reduce(outcomes)


def _check_one(
    g: Guest, j: int, n_disks: int, required: dict[str, str], timeout: float
) -> StateCheck:
    d = f"/tmp/cs/{j}"
    links = " && ".join(
        f"ln -sf {shlex.quote(g.disk(f's{j}d{k}'))} {d}/d{k}" for k in range(n_disks)
    )
    pool.run(g, ["sh", "-c", f"mkdir -p {d} {ALTROOT} && {links}"])
    phases: dict[str, float] = {}
    out: list[str] = []
    argv = ["zpool", "import", "-d", d, "-f", "-N", "-R", ALTROOT, "-o", "cachefile=none"]
    t = time.monotonic()
    r = g.run([*argv, pool.POOL], timeout=timeout)
    phases["mount"] = time.monotonic() - t
    rewound = False
    if r.exitcode != 0:
        out.append(f"zpool import: exit {r.exitcode}\n{(r.err or r.out).strip()}")
        # ZFS's own recovery: roll back to the last txg every disk has (-F discards the
        # newer ones), the counterpart of a repairing fsck.
        t = time.monotonic()
        r = g.run([*argv, "-F", pool.POOL], timeout=timeout)
        phases["repair"] = time.monotonic() - t
        if r.exitcode != 0:
            out.append(f"zpool import -F: exit {r.exitcode}\n{(r.err or r.out).strip()}")
            text = "\n".join(out)
            return StateCheck(judge(False, None, False, None), sum(phases.values()), phases, text)
        rewound = True
        out.append("zpool import -F: rewound\n" + (r.err or r.out).strip())
    phases["fsck_after"] = pool.timed(
        g,
        [["zpool", "scrub", pool.POOL], ["zpool", "wait", "-t", "scrub", pool.POOL]],
        timeout=timeout,
    )
    status = pool.status(g)
    m = g.run(["zfs", "mount", pool.POOL], timeout=timeout)
    verify: dict[str, Any] | None = None
    if m.exitcode == 0:
        path = f"/tmp/cs/required-{j}.json"
        g.write_file(path, json.dumps(required).encode())
        v = g.run(
            [
                "python3",
                f"{record.GUEST_DIR}/zfsload.py",
                "verify",
                "--root",
                f"{ALTROOT}{pool.MOUNT}",
                "--required",
                path,
            ],
            timeout=timeout,
        )
        verify = (
            guestmsg.read(contract.ZfsVerify, "zfsload.py verify", v.out).to_dict()
            if v.exitcode == 0
            else {"ok": False, "error": v.err[-500:]}
        )
    else:
        out.append(f"zfs mount: exit {m.exitcode}\n{(m.err or m.out).strip()}")
    t = time.monotonic()
    pool.run(g, ["zpool", "export", pool.POOL], timeout=timeout)
    phases["umount"] = time.monotonic() - t
    outcome = judge(True, status, m.exitcode == 0, verify, rewound=rewound)
    s = status.scan
    out.append(
        f"pool {status.state}; scrub repaired {s.processed if s else 0} B, "
        f"{sum(v.checksum for v in status.leaves())} checksum errors, "
        f"{status.error_count} permanent errors",
    )
    if verify is not None and not verify.get("ok"):
        out.append("oracle: " + json.dumps(verify)[:1500])
    return StateCheck(outcome, sum(phases.values()), phases, "\n".join(out), status, verify)


def check_batch(
    batch: Sequence[tuple[MultiState, Sequence[Path]]],
    required: dict[str, dict[str, str]],
    *,
    memory_mb: int,
    timeout: float,
) -> Iterator[tuple[MultiState, StateCheck]]:
    """Yield each state's check as soon as it is known; a hang or panic costs only its
    own state (the guest is replaced for the rest)."""

    @contextlib.contextmanager
    def start(todo: Sequence[tuple[MultiState, Sequence[Path]]]) -> Iterator[Guest]:
        disks = tuple(
            Disk(img, f"s{j}d{k}") for j, (_, imgs) in enumerate(todo) for k, img in enumerate(imgs)
        )
        spec = GuestSpec(disks=disks, memory_mb=memory_mb, command_timeout=timeout)
        with start_guest(spec) as g:
            pool.run(g, ["modprobe", "zfs"], timeout=120)
            record.install_scripts(g)
            yield g

    def one(g: Guest, j: int, item: tuple[MultiState, Sequence[Path]]) -> StateCheck:
        st, imgs = item
        return _check_one(g, j, len(imgs), required.get(st.mark, {}), timeout)

    def failed(item: tuple[MultiState, Sequence[Path]], kind: Outcome, text: str) -> StateCheck:
        return StateCheck(kind, 0.0, {}, text)

    for (st, _), result in in_guests(batch, start, one, failed):
        yield st, result


class ZfsCrash(lifecycle.Experiment):
    """Crash states of a whole pool: record, cut, import + scrub + verify each."""

    def __init__(self, run: lifecycle.Run):
        super().__init__(run)
        self._stack = contextlib.ExitStack()
        self.results: dict[str, StateCheck] = {}

    def prepare(self) -> None:
        run, sc = self.run, self.sc
        assert sc.crash is not None
        self.spec: CrashSpec = sc.crash
        rdir = run.dir
        self.recording = _recording(rdir, sc, run.seed, run.progress)
        rec = self.recording
        self.logs = self._stack.enter_context(open_logs(rec.logs))
        for k, lg in enumerate(self.logs):
            ls = lg.stats()
            run.store.add_log(
                store.LogInfo(
                    lg.hash,
                    str(lg.path),
                    ls.entries,
                    ls.flushes,
                    ls.fuas,
                    ls.marks,
                    ls.discards,
                    ls.bytes_written,
                ),
                run_id=run.run_id,
                role=f"vdev{k}",
            )
        self.states = multicrash.generate(
            self.logs, self.spec.state_specs(), run.seed, device_size=rec.disk_size
        )
        (rdir / "states.json").write_text(json.dumps([s.to_dict() for s in self.states]))

    def close(self) -> None:
        self._stack.close()

    def items(self) -> Sequence[MultiState]:
        return self.states

    def check(self, todo: Sequence[lifecycle.Item]) -> Iterator[tuple[MultiState, StateCheck]]:
        states = [s for s in todo if isinstance(s, MultiState)]
        rec, c, progress = self.recording, self.spec, self.run.progress
        batch_dir = self.run.dir / "batch"
        for b in range(0, len(states), c.guest_batch):
            chunk = states[b : b + c.guest_batch]
            shutil.rmtree(batch_dir, ignore_errors=True)
            batch_dir.mkdir(parents=True)
            progress("materialising disk images", b, len(states))
            batch = [(s, materialize(self.logs, s, batch_dir, rec.disk_size)) for s in chunk]
            host: dict[str, zdb.ZdbCheck] = {}
            if c.zdb:
                progress(f"zdb on {len(chunk)} disk sets", b, len(states))
                for s, imgs in batch:
                    host[s.id] = zdb.check(imgs, batch_dir / f"zdb-{s.id}", self.sc.timeout)
            progress(f"importing {len(chunk)} disk sets in a guest", b, len(states))
            for s, result in check_batch(
                batch, rec.required, memory_mb=self.sc.memory_mb, timeout=self.sc.timeout
            ):
                yield s, dataclasses.replace(result, zdb=host.get(s.id))
            shutil.rmtree(batch_dir, ignore_errors=True)

    def commit(self, item: lifecycle.Item, result: Any) -> None:
        assert isinstance(item, MultiState) and isinstance(result, StateCheck)
        _commit(self.run.store, self.run.run_id, item, result)
        self.results[item.id] = result

    def expected(self, item: ItemOutcome) -> bool:
        # A lying-disk state's outcome is the model's, not ZFS's (a hang in one is still
        # the lab's: the account counts harness outcomes whether expected or not).
        return not item.detail.get("honest", True)

    @property
    def lying(self) -> list[MultiState]:
        """The checked states that model disks losing acknowledged writes."""
        return [s for s in self.states if not s.honest and s.id in self.results]

    def summary(self) -> dict[str, Any]:
        lying = dict(lifecycle.account(self).expected)
        honest = (self.results.get(s.id) for s in self.states if s.honest)
        checked = [r for r in honest if r is not None and r.zdb is not None]
        return {
            "states": len(self.states),
            **({"zdb_disagreements": sum(r.zdb_disagrees for r in checked)} if checked else {}),
            "recording": {k: round(v, 3) for k, v in self.recording.seconds.items()},
            **({"lying_disk_outcome_counts": lying} if lying else {}),
        }


def _recording(rdir: Path, sc: ZfsScenario, seed: int, progress: lifecycle.Progress) -> Recording:
    """The pool's recorded logs: kept from an earlier attempt of this run (resume), else
    recorded now in a guest."""
    saved = rdir / "recording.json"
    if saved.exists():
        return Recording.from_json(json.loads(saved.read_text()))
    progress("recording the pool's vdevs in a guest", 0, 0)
    rec = record_pool(rdir, sc, seed)
    saved.write_text(json.dumps(rec.to_json()))
    return rec


def materialize(
    logs: Sequence[logwrites.Log], s: MultiState, directory: Path, size: int
) -> list[Path]:
    """One image per disk of state ``s``, built from scratch (sparse)."""
    out = []
    for k, lg in enumerate(logs):
        path = directory / f"{s.id}-d{k}.img"
        replay.materialize(lg, s.disk_state(k), path, size)
        out.append(path)
    return out


@contextlib.contextmanager
def open_logs(paths_: Sequence[Path]) -> Iterator[list[logwrites.Log]]:
    """Every log open; all closed on the way out."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(logwrites.open_log(p)) for p in paths_]


def _commit(st: store.Store, run_id: str, s: MultiState, r: StateCheck) -> None:
    st.record_state_result(
        run_id,
        store.CrashState(
            id=s.id,
            log_hash=s.log_hashes[0],
            generator=s.generator,
            prefix=s.cuts[0],
            params=s.to_dict(),
            last_mark=s.mark,
            description=s.describe(),
        ),
        [
            *([_zdb_check(r.zdb)] if r.zdb is not None else []),
            store.CheckResult(
                stage=store.Stage.GUEST,
                checker="zpool import+scrub+verify",
                outcome=r.outcome,
                seconds=r.seconds,
                output=r.output if s.honest else f"{LYING_NOTE}\n{r.output}",
            ),
        ],
        r.phases,
        # The guest's import, scrub and oracle decide; zdb is evidence beside it (zdb.py).
        r.outcome,
    )


def _zdb_check(z: zdb.ZdbCheck) -> store.CheckResult:
    if z.exitcode == -1:
        outcome = Outcome.TIMEOUT
    else:
        outcome = Outcome.CONSISTENT if z.ok else Outcome.UNREPAIRABLE
    return store.CheckResult(
        stage=store.Stage.HOST,
        checker=z.checker,
        outcome=outcome,
        seconds=z.seconds,
        output=z.output,
        exit_status=z.exitcode,
    )
