"""``experiment = "crash"``: crash states of a whole pool, one dm-log-writes log per vdev.

record -> multi-disk crash states -> materialise one image per disk -> import, scrub and
verify in a guest -> the store.

Record: in one guest, every data disk ``zdK`` sits under its own ``log-writes`` target
``lwK`` logging to its own disk ``zlK`` (2N virtual disks); the pool is created on
``/dev/mapper/lw*``. ZFS takes a dm device as a plain block device (no partition table,
so no wait for udev partition nodes): the guest runs without udev, which boots in a
third of the time. After ``zpool create`` every log gets ``crashlab:mkfs``; the workload
(``harness/guest/zfsload.py``) runs in rounds, each ended by ``zpool sync`` and then the
mark ``crashlab:zsync:<n>`` in every log. ``zpool sync`` returns after the txg is on
every vdev, and nothing writes between the sync and the marks, so the marks of one round
are one quiescent moment of the whole pool.

States: ``faults.multicrash`` (consistent cuts at each common mark; independent cuts per
disk between two marks). Check, in a guest, never on the host kernel: each state's disk
images (copies) are attached, symlinked into a directory of their own, and
``zpool import -d DIR -f -N -R ALTROOT`` imports exactly that set; then ``zpool scrub``
+ ``zpool wait -t scrub``, ``zpool status -j --json-int``, ``zfs mount``, the oracle
(every file the last common mark requires, by sha256), ``zpool export``.

Verdicts (harness.outcome): import refused, even with ``-F`` (rewind to an older txg),
or permanent data errors after the scrub -> ``unrepairable``; an import that needed
``-F``, or a scrub that repaired bytes or found checksum errors -> ``repaired``; a
required file missing or different -> ``data_loss``; else ``consistent``. A hang or a
panic is the lab's ``timeout``/``panic`` and the guest is replaced for the rest.

Torn sets that no power cut of honest disks leaves (``crash.torn_model = "any"``, see
faults/multicrash.py) are checked like the others, but their verdicts are a disk losing
acknowledged writes, not ZFS: stored as they came out (nothing hidden), labelled
``lying-disk`` in the state's description and the check's output, kept out of the
summary's ``outcome_counts`` (they get ``lying_disk_outcome_counts``) and out of the
exit status.

Store: a run of kind ``zfs``; each vdev's log in ``logs`` (role ``vdevK``); each state in
``crash_states`` with disk 0's log hash and cut as ``log_hash``/``prefix`` and every cut in
``params`` (``MultiState.to_dict``); the guest check in ``checks``; import, scrub and
export seconds in ``recovery_times`` as ``mount``, ``fsck_after`` and ``umount``.

Not done yet: resuming a killed run (states are committed one by one, but a rerun
records afresh); incremental replay (each disk image is built from entry 0 -- cheap at
these sizes); host-side ``zdb -e -p DIR`` on the images; cuts torn *inside* a disk
(reorder/torn within a log) combined with the cross-disk model.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import paths
from harness.config.zfs import CrashSpec, ZfsScenario
from harness.errors import GuestPanic, GuestTimeout, HarnessError
from harness.experiments.zfs import parse, pool
from harness.experiments.zfs.scan import run_env
from harness.image import build as image
from harness.outcome import Outcome, reduce
from harness.record import logwrites
from harness.record import recorder as record
from harness.replay import multicrash
from harness.replay import replayer as replay
from harness.replay.crashstates import MKFS_MARK
from harness.replay.multicrash import MultiState
from harness.store import db as store
from harness.vm.backend import Disk, Guest, GuestSpec, start_guest

log = logging.getLogger("crashlab.zfs.crash")

ZSYNC_PREFIX = "crashlab:zsync:"
LYING_NOTE = (
    f"[{multicrash.LYING}] this disk set needs a disk that lost acknowledged writes: "
    "its verdict is not a ZFS finding"
)
ALTROOT = "/mnt/cs"
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Recording:
    logs: tuple[Path, ...]
    disk_size: int
    required: dict[str, dict[str, str]]  # mark -> {file name: sha256} that must survive
    seconds: dict[str, float]
    zfs_version: str
    guest_kernel: str
    accelerator: str


@dataclass(frozen=True)
class StateCheck:
    outcome: Outcome
    seconds: float
    phases: dict[str, float]
    output: str
    status: parse.PoolStatus | None = None
    verify: dict[str, Any] | None = None

    @property
    def repaired(self) -> int:
        scan = self.status.scan if self.status else None
        return scan.processed if scan else 0

    @property
    def checksum_errors(self) -> int:
        return sum(v.checksum for v in self.status.leaves()) if self.status else 0


@dataclass
class CrashReport:
    run_id: str
    db: Path
    scenario: ZfsScenario
    recording: Recording
    states: list[MultiState]
    results: dict[str, StateCheck] = field(default_factory=dict)
    seconds: float = 0.0

    def counts(self, *, honest: bool = True) -> dict[str, int]:
        """Verdict counts of the honest states (the ones that can be findings), or with
        ``honest=False`` of the lying-disk ones."""
        out: dict[str, int] = {}
        for s in self.states:
            r = self.results.get(s.id)
            if r is not None and s.honest == honest:
                out[str(r.outcome)] = out.get(str(r.outcome), 0) + 1
        return out

    @property
    def lying(self) -> list[MultiState]:
        """The checked states that model disks losing acknowledged writes."""
        return [s for s in self.states if not s.honest and s.id in self.results]


def run_dir(run_id: str) -> Path:
    return paths.work_dir() / "zfs" / run_id


# --- record -------------------------------------------------------------------------


def required_at_marks(rounds: Sequence[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The oracle: at ``crashlab:zsync:n``, every file after round n that round n+1 does
    not touch (the crash may fall anywhere in round n+1); nothing at mkfs."""
    out: dict[str, dict[str, str]] = {MKFS_MARK: {}}
    for i, r in enumerate(rounds):
        nxt = set(rounds[i + 1]["touched"]) if i + 1 < len(rounds) else set()
        out[f"{ZSYNC_PREFIX}{r['round']}"] = {
            name: sha for name, sha in r["files"].items() if name not in nxt
        }
    return out


def record_pool(rdir: Path, sc: ZfsScenario, seed: int) -> Recording:
    """Boot a guest, build the pool on N logged disks, run the rounds, return the logs."""
    assert sc.crash is not None
    p = sc.pool
    rdir.mkdir(parents=True, exist_ok=True)
    disks: list[Disk] = []
    for k in range(p.disks):
        for name, size in ((f"zd{k}", p.disk_size), (f"zl{k}", max(4 * p.disk_size, 1 << 30))):
            path = rdir / f"{name}.raw"
            path.unlink(missing_ok=True)
            with open(path, "wb") as f:
                f.truncate(size)
            disks.append(Disk(path, name))
    seconds: dict[str, float] = {}
    rounds: list[dict[str, Any]] = []
    spec = GuestSpec(disks=tuple(disks), memory_mb=sc.memory_mb, command_timeout=sc.timeout)
    t = time.monotonic()
    with start_guest(spec) as g:
        seconds["boot"] = time.monotonic() - t

        def step(name: str, argv: list[str], timeout: float = 300) -> str:
            t0 = time.monotonic()
            out = pool.run(g, argv, timeout=timeout)
            seconds[name] = seconds.get(name, 0.0) + time.monotonic() - t0
            return out

        def mark(text: str) -> None:
            for k in range(p.disks):
                step("mark", ["dmsetup", "message", f"lw{k}", "0", "mark", text])

        step("modprobe", ["modprobe", "zfs"], timeout=120)
        zfs_version, kernel = pool.versions(g)
        record.install_scripts(g)
        for k in range(p.disks):
            dev = step("dm-create", ["readlink", "-f", g.disk(f"zd{k}")]).strip()
            logdev = step("dm-create", ["readlink", "-f", g.disk(f"zl{k}")]).strip()
            sectors = step("dm-create", ["blockdev", "--getsz", dev]).strip()
            table = f"0 {sectors} log-writes {dev} {logdev}"
            step("dm-create", ["dmsetup", "create", f"lw{k}", "--table", table])
        step("create", create_argv(sc, [f"/dev/mapper/lw{k}" for k in range(p.disks)]))
        # zpool create can return with a txg still syncing: once, vdev 0 logged one label
        # run more than the others before its mkfs mark (the marks go in one disk after
        # the other) and the mkfs cut scrubbed with checksum errors. Like the round marks,
        # this one must be a quiescent moment.
        step("sync", ["zpool", "sync", pool.POOL])
        mark(MKFS_MARK)
        c = sc.crash
        for n in range(1, c.rounds + 1):
            out = step(
                "workload",
                [
                    "python3",
                    f"{record.GUEST_DIR}/zfsload.py",
                    "round",
                    "--root",
                    pool.MOUNT,
                    "--seed",
                    str(seed),
                    "--round",
                    str(n),
                    "--files",
                    str(c.files),
                    "--max-size",
                    str(c.max_size),
                    "--ops",
                    str(c.ops),
                ],
                timeout=sc.timeout,
            )
            rounds.append(json.loads(out))
            step("sync", ["zpool", "sync", pool.POOL])
            mark(f"{ZSYNC_PREFIX}{n}")
        step("export", ["zpool", "export", pool.POOL])
        for k in range(p.disks):
            step("dm-remove", ["dmsetup", "remove", f"lw{k}"])
        accelerator = g.accelerator
    logs = tuple(rdir / f"zl{k}.raw" for k in range(p.disks))
    for path in logs:
        with logwrites.open_log(path) as lg:
            used = lg.used
        os.truncate(path, used)
    for k in range(p.disks):
        (rdir / f"zd{k}.raw").unlink(missing_ok=True)
    return Recording(
        logs, p.disk_size, required_at_marks(rounds), seconds, zfs_version, kernel, accelerator
    )


def create_argv(sc: ZfsScenario, devices: list[str]) -> list[str]:
    p = sc.pool
    return [
        "zpool",
        "create",
        "-f",
        "-o",
        f"ashift={p.ashift}",
        "-o",
        "cachefile=none",
        "-O",
        "compression=off",
        "-O",
        "atime=off",
        "-O",
        f"recordsize={p.recordsize}",
        "-O",
        f"mountpoint={pool.MOUNT}",
        pool.POOL,
        *pool.vdev_args(p.layout, devices),
    ]


# --- check --------------------------------------------------------------------------


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
        verify = json.loads(v.out) if v.exitcode == 0 else {"ok": False, "error": v.err[-500:]}
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
    todo = list(batch)
    while todo:
        disks = tuple(
            Disk(img, f"s{j}d{k}") for j, (_, imgs) in enumerate(todo) for k, img in enumerate(imgs)
        )
        spec = GuestSpec(disks=disks, memory_mb=memory_mb, command_timeout=timeout)
        failed_at: int | None = None
        try:
            with start_guest(spec) as g:
                pool.run(g, ["modprobe", "zfs"], timeout=120)
                record.install_scripts(g)
                for j, (st, imgs) in enumerate(todo):
                    try:
                        yield st, _check_one(g, j, len(imgs), required.get(st.mark, {}), timeout)
                    except (GuestTimeout, GuestPanic) as e:
                        kind = Outcome.TIMEOUT if isinstance(e, GuestTimeout) else Outcome.PANIC
                        yield st, StateCheck(kind, 0.0, {}, f"{e.message}\n{e.console[-1200:]}")
                        failed_at = j
                        break
        except HarnessError as e:
            if failed_at is None:
                for st, _ in todo:
                    text = f"{e.message}\n{e.detail or ''}"[-1500:]
                    yield st, StateCheck(Outcome.HARNESS_ERROR, 0.0, {}, text)
                return
        todo = todo[failed_at + 1 :] if failed_at is not None else []


# --- the run ------------------------------------------------------------------------


def execute(
    sc: ZfsScenario, *, db: Path, seed: int | None = None, progress: Progress
) -> CrashReport:
    assert sc.crash is not None
    started = time.monotonic()
    img = image.require_image()
    seed = sc.seed if seed is None else seed
    st = store.Store.open(db)
    try:
        run_id = st.begin_run(
            sc.name,
            store.RunKind.ZFS,
            sc.resolved(),
            seed,
            fs="zfs",
            env=store.RunEnv(image_hash=img.hash),
        )
        try:
            report = _execute(sc, sc.crash, st, run_id, seed, img, db, progress)
        except BaseException as e:
            status = (
                store.RunStatus.INTERRUPTED
                if isinstance(e, KeyboardInterrupt)
                else store.RunStatus.FAILED
            )
            st.finish_run(run_id, status, {"error": str(e)[:500]})
            raise
        report.seconds = time.monotonic() - started
        st.finish_run(
            run_id,
            store.RunStatus.DONE,
            {
                "outcome_counts": report.counts(),
                **(
                    {"lying_disk_outcome_counts": report.counts(honest=False)}
                    if report.lying
                    else {}
                ),
                "states": len(report.states),
                "recording": {k: round(v, 3) for k, v in report.recording.seconds.items()},
                "seconds": round(report.seconds, 2),
            },
        )
        return report
    finally:
        st.close()


def _execute(
    sc: ZfsScenario,
    c: CrashSpec,
    st: store.Store,
    run_id: str,
    seed: int,
    img: image.Image,
    db: Path,
    progress: Progress,
) -> CrashReport:
    rdir = run_dir(run_id)
    progress("recording the pool's vdevs in a guest", 0, 0)
    rec = record_pool(rdir, sc, seed)
    (rdir / "required.json").write_text(json.dumps(rec.required))
    st.set_run_env(run_id, run_env(img, rec.accelerator, rec.guest_kernel, rec.zfs_version))
    with open_logs(rec.logs) as logs:
        for k, lg in enumerate(logs):
            ls = lg.stats()
            st.add_log(
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
                run_id=run_id,
                role=f"vdev{k}",
            )
        states = multicrash.generate(logs, c.state_specs(), seed, device_size=rec.disk_size)
        report = CrashReport(run_id, db, sc, rec, states)
        (rdir / "states.json").write_text(json.dumps([s.to_dict() for s in states]))
        batch_dir = rdir / "batch"
        done = 0
        for b in range(0, len(states), c.guest_batch):
            chunk = states[b : b + c.guest_batch]
            shutil.rmtree(batch_dir, ignore_errors=True)
            batch_dir.mkdir(parents=True)
            progress("materialising disk images", done, len(states))
            batch = [(s, materialize(logs, s, batch_dir, rec.disk_size)) for s in chunk]
            progress(f"importing {len(chunk)} disk sets in a guest", done, len(states))
            for s, result in check_batch(
                batch, rec.required, memory_mb=sc.memory_mb, timeout=min(sc.timeout, 300)
            ):
                _commit(st, run_id, s, result)
                report.results[s.id] = result
                done += 1
                progress(f"importing {len(chunk)} disk sets in a guest", done, len(states))
            shutil.rmtree(batch_dir, ignore_errors=True)
    return report


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
            store.CheckResult(
                stage=store.Stage.GUEST,
                checker="zpool import+scrub+verify",
                outcome=r.outcome,
                seconds=r.seconds,
                output=r.output if s.honest else f"{LYING_NOTE}\n{r.output}",
            )
        ],
        r.phases,
        r.outcome,
    )


__all__ = ["CrashReport", "execute", "record_pool"]
