"""``scenario run`` for ``kind = "zfs"``: pool -> fill -> fault -> scrub or resilver -> store.

Each repetition of each cell runs on fresh sparse disks (copies of the cell's one fill,
``basefill``); repetitions on the same disk files share one guest (``kept``: export,
restore, import), which leaks no pool state (ARC, event queue) between them. The scan
is timed three ways, kept side by side in ``zfs_scans``: from the events (``seconds``, to one kernel
tick), from ``zpool status`` (whole seconds, what the seed's authors had), and by the
guest's clock around ``zpool scrub/replace`` + ``zpool wait`` (``wall_seconds``, which
includes process start-up). Throughput is bytes repaired per second for a resilver
(``processed``: what was written to the new disk), bytes issued per second for a scrub.

Verdicts: a scan that leaves no permanent data error is ``consistent``; one that does is
``data_loss``. Data loss with more damaged disks than the layout's redundancy is the
expected result of the experiment (exit 0, reported as such); with no more damaged disks
than the redundancy it is a finding (exit 1): ZFS should have repaired it.

Multi-disk crash states (``experiment = "crash"``, issue 4 item 6) are
``harness.zfs.crash``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faults import disk as faults
from faults.disk import When
from harness.check import zpool as parse
from harness.errors import HarnessError
from harness.experiments import lifecycle
from harness.experiments.zfs import basefill, fits, kept, pool, progress
from harness.experiments.zfs.basefill import Filled
from harness.experiments.zfs.cells import Cell
from harness.experiments.zfs.settings import Experiment, ZfsScenario
from harness.outcome import Outcome
from harness.store import db as store
from harness.store.model import ItemOutcome
from harness.vm.backend import Guest

log = logging.getLogger("crashlab.zfs")


@dataclass
class Measurement:
    cell: Cell
    repetition: int
    fill_target: float
    fill: float  # achieved, % of usable capacity (zfs used / (used + available))
    pool_alloc: int  # raw bytes allocated, parity included (zpool list)
    written: int
    status: parse.PoolStatus
    windows: list[parse.Window]  # every scan of this fault, each timed on its own
    tick_ns: int
    wall_seconds: float
    damage: list[faults.Damage]
    zfs_version: str
    guest_kernel: str
    accelerator: str
    events_dropped: int
    checksum_ereports: int
    cell_kind: Experiment = Experiment.SCRUB
    phases: dict[str, float] = field(default_factory=dict)
    expected_loss: bool = False  # more damaged disks than this cell's redundancy
    progress: list[dict[str, Any]] = field(default_factory=list)  # zpool status samples

    @property
    def window(self) -> parse.Window:
        """First start to last finish: the time to full redundancy."""
        return parse.overall(self.windows)

    @property
    def seconds_source(self) -> str:
        """``events`` (to the kernel tick) or ``status`` (whole seconds)."""
        return "events" if self.window.seconds is not None else "status"

    @property
    def scan(self) -> parse.ScanStats:
        assert self.status.scan is not None
        return self.status.scan

    @property
    def seconds(self) -> float:
        if self.window.seconds is not None:
            return self.window.seconds
        return float(self.scan.status_seconds or 0)

    @property
    def moved(self) -> int:
        """The bytes throughput is computed from (see the module docstring)."""
        return self.scan.processed if self.cell_kind is Experiment.RESILVER else self.scan.issued

    @property
    def bytes_per_second(self) -> float | None:
        return self.moved / self.seconds if self.seconds > 0 else None

    @property
    def outcome(self) -> Outcome:
        if self.scan.state != "FINISHED":
            return Outcome.HARNESS_ERROR
        return Outcome.DATA_LOSS if self.status.error_count else Outcome.CONSISTENT


@dataclass(frozen=True)
class Rep:
    """One repetition of one cell: an item of the run."""

    index: int  # the cell's position in the scenario
    cell: Cell
    repetition: int

    @property
    def id(self) -> str:
        return f"c{self.index}-r{self.repetition}"


def expected_loss(sc: ZfsScenario, cell: Cell) -> bool:
    """Data loss is this cell's expected result when the fault damages more disks than
    *its* layout survives (raidz2 with two disks lost is not expected to lose data)."""
    return len(sc.fault.disks) > cell.pool.layout.redundancy(cell.pool.disks)


class ZfsScan(lifecycle.Experiment):
    """Scrub or resilver: pool -> fill -> fault -> scan -> measure, per cell and
    repetition, each in fresh guests on fresh disks."""

    def __init__(self, run: lifecycle.Run):
        super().__init__(run)
        self.measurements: list[Measurement] = []
        self.fills: dict[str, dict[str, float]] = {}  # cell -> what filling it once cost

    def prepare(self) -> None:
        self.cells = cells = list(self.sc.cells())
        # Repetitions interleaved across cells: a noisy spell on the host spreads over
        # every cell instead of biasing the one that happened to run then.
        self.reps = [Rep(i, cell, r) for r in range(self.sc.repeat) for i, cell in enumerate(cells)]
        ports = max(pool.disk_count(c, self.sc.fault) for c in cells)
        self.kept = kept.KeptGuest(self.sc, ports) if self.sc.keep_guest else None

    def items(self) -> Sequence[Rep]:
        return self.reps

    retries_harness_items = False  # a scan's row is appended, never replaced

    def done(self) -> set[str]:
        return self.run.store.scanned_items(self.run.run_id)

    def check(self, todo: Sequence[lifecycle.Item]) -> Iterator[tuple[Rep, Measurement]]:
        run = self.run
        try:
            yield from self._each(todo)
        finally:
            # Also when the run stops early (an error, or the lifecycle closing this
            # generator): the kept guest is not left running until the process exits.
            if self.kept is not None:
                self.kept.close()
        if self.kept is not None:
            shutil.rmtree(run.dir / "disks", ignore_errors=True)
        # Every repetition has its result: the kept fills are no longer needed (an
        # interrupted run keeps them for its resume).
        for kept_fill in run.dir.glob("base-p*"):
            shutil.rmtree(kept_fill, ignore_errors=True)
        for source in run.dir.glob("fill-source-*"):
            source.unlink()

    def _each(self, todo: Sequence[lifecycle.Item]) -> Iterator[tuple[Rep, Measurement]]:
        run = self.run
        for n, rep in enumerate(r for r in todo if isinstance(r, Rep)):
            run.progress(f"{rep.cell.label()} #{rep.repetition + 1}", n, len(todo))
            base = None
            # Something to share: repetitions, or fills of one pool on one ladder.
            if self.sc.fill_once and (self.sc.repeat > 1 or len(self._ladder(rep.cell)) > 1):
                run.progress(f"{rep.cell.label()}: filling once", n, len(todo))
                ladder = self._ladder(rep.cell)
                base = basefill.base(self.sc, ladder, rep.cell, run.seed * 1000, self.kept)
                self.fills[rep.cell.label()] = base.seconds
            if base is None or self.kept is None:
                m = run_once(self.sc, rep.cell, rep.repetition, run.seed, run.dir / rep.id, base)
            else:
                m = self._run_kept(rep, base)
            m.expected_loss = expected_loss(self.sc, rep.cell)
            yield rep, m

    def _run_kept(self, rep: Rep, base: Filled) -> Measurement:
        """A repetition in the kept guest, on the run's one set of disk files."""
        assert self.kept is not None
        m = None
        try:
            m = run_once(
                self.sc,
                rep.cell,
                rep.repetition,
                self.run.seed,
                self.run.dir / "disks",
                base,
                self.kept,
            )
            return m
        finally:
            self.kept.release(ok=m is not None, phases=m.phases if m else None)

    def _ladder(self, cell: Cell) -> list[tuple[Cell, Path]]:
        """Every fill of ``cell``'s pool in this run, lowest first, each with the directory
        its filled disks are kept in (cells that differ only in load share them)."""
        pools = list(dict.fromkeys(c.pool for c in self.cells))
        fills = sorted({c.fill for c in self.cells if c.pool == cell.pool})
        n = pools.index(cell.pool)
        return [
            (dataclasses.replace(cell, fill=f), self.run.dir / f"base-p{n}-{f:g}") for f in fills
        ]

    def commit(self, item: lifecycle.Item, result: Any) -> None:
        assert isinstance(item, Rep) and isinstance(result, Measurement)
        _store(self.run.store, self.run.run_id, self.sc, item, result)
        self.measurements.append(result)

    def expected(self, item: ItemOutcome) -> bool:
        # A fault past the cell's parity loses data by design (``expected_loss``).
        return item.outcome is Outcome.DATA_LOSS and bool(item.detail.get("expected_loss"))

    def summary(self) -> dict[str, Any]:
        cells = {rep.cell.label(): expected_loss(self.sc, rep.cell) for rep in self.reps}
        return {
            "scans": len(self.reps),
            "data_loss_expected": {k: v for k, v in cells.items() if v},
            "fill_once": {k: {p: round(v, 2) for p, v in s.items()} for k, s in self.fills.items()},
            **fits.sweep_summary(fits.rows(self.run.store, self.run.run_id)),
        }


def run_once(
    sc: ZfsScenario,
    cell: Cell,
    rep: int,
    seed: int,
    rdir: Path,
    base: Filled | None = None,
    keeper: kept.KeptGuest | None = None,
) -> Measurement:
    """One repetition in fresh guests; the disk files are deleted afterwards. With
    ``base`` (the cell filled once, ``basefill``) the repetition starts from the filled
    disks (overlays on them, ``basefill.restore``): import instead of create + fill, in
    ``keeper``'s guest if given."""
    once = _Once(sc, cell, pool.make_disks(rdir, cell, sc.fault))
    try:
        with contextlib.ExitStack() as stack:
            if base is not None:
                g, filled, damage = once.from_base(stack, base, keeper)
            else:
                g, filled, damage = once.fresh(stack, rdir, seed)
            return once.measure(g, rep, filled, damage)
    finally:
        if keeper is None:
            for d in once.disks.all():
                d.path.unlink(missing_ok=True)
            shutil.rmtree(rdir, ignore_errors=True)


@dataclass
class _Once:
    """One repetition as it goes: the seconds of its phases, and its disks (replaced when
    restored from the cell's fill or given a fill source: the ones deleted at the end)."""

    sc: ZfsScenario
    cell: Cell
    disks: pool.DiskSet
    phases: dict[str, float] = field(default_factory=dict)

    def lap(self, name: str, t: float) -> float:
        now = time.monotonic()
        self.phases[name] = self.phases.get(name, 0.0) + now - t
        return now

    def damage_now(self) -> list[faults.Damage]:
        t = time.monotonic()
        done = faults.apply(self.sc.fault, [d.path for d in self.disks.data])
        self.lap("fault", t)
        return done

    def guest(self, stack: contextlib.ExitStack) -> Guest:
        return stack.enter_context(pool.guest(self.sc, self.disks.all(), self.phases))

    def import_pool(self, g: Guest) -> None:
        t = time.monotonic()
        pool.run(g, pool.import_argv())
        self.lap("import", t)

    def from_base(
        self, stack: contextlib.ExitStack, base: Filled, keeper: kept.KeptGuest | None
    ) -> tuple[Guest, Filled, list[faults.Damage]]:
        """The cell's fill restored, damaged now if the fault is offline, imported."""
        t = time.monotonic()
        self.disks = basefill.restore(base, self.disks, self.sc.fault)
        self.lap("restore", t)
        damage = self.damage_now() if self.sc.fault.when is When.OFFLINE else []
        g = keeper.plug(self.disks, self.phases) if keeper is not None else self.guest(stack)
        self.import_pool(g)
        return g, base, damage

    def fresh(
        self, stack: contextlib.ExitStack, rdir: Path, seed: int
    ) -> tuple[Guest, Filled, list[faults.Damage]]:
        """A pool created and filled; an offline fault is applied between an export and
        an import in a second guest."""
        self.disks = dataclasses.replace(
            self.disks, source=pool.fill_source(rdir.parent, seed * 1000)
        )
        g = self.guest(stack)
        filled = basefill.create_and_fill(g, self.cell, self.disks, self.sc, self.phases)
        damage: list[faults.Damage] = []
        if self.sc.fault.when is When.OFFLINE:
            pool.run(g, ["zpool", "export", pool.POOL])
            stack.close()
            damage = self.damage_now()
            g = self.guest(stack)
            self.import_pool(g)
        return g, filled, damage

    def measure(
        self, g: Guest, rep: int, filled: Filled, damage: list[faults.Damage]
    ) -> Measurement:
        """An online fault now, then the scan, timed, and what the pool says of it."""
        sc, cell = self.sc, self.cell
        zfs_version, kernel = pool.versions(g)
        if sc.fault.when is not When.OFFLINE:
            pool.run(g, ["zpool", "events", "-c"])
            damage = self.damage_now()
        if sc.progress_interval:
            progress.start(g, sc.progress_interval)
        if cell.load:
            pool.start_load(g, sc.load_job)
        t = time.monotonic()
        wall = _scan(g, sc, cell, self.disks)
        t = self.lap("scan", t)
        if cell.load:
            pool.stop_load(g)
        curve = progress.collect(g) if sc.progress_interval else []
        status = pool.status(g)
        _, events = pool.events(g)
        self.lap("collect", t)
        if status.scan is None:
            raise HarnessError(
                f"{cell.label()}: zpool status shows no scan after the {sc.experiment}"
            )
        windows = parse.scan_windows(events, str(sc.experiment))
        if parse.overall(windows).seconds is None:
            log.warning("no %s start/finish events; using zpool status", sc.experiment)
        return Measurement(
            cell=cell,
            repetition=rep,
            fill_target=cell.fill,
            fill=100 * filled.used / (filled.used + filled.available),
            pool_alloc=filled.alloc,
            written=filled.written,
            status=status,
            windows=windows,
            tick_ns=parse.tick_ns(events),
            wall_seconds=wall,
            damage=damage,
            zfs_version=zfs_version,
            guest_kernel=kernel,
            accelerator=g.accelerator,
            events_dropped=events.dropped,
            checksum_ereports=len(events.of("ereport.fs.zfs.checksum")),
            phases=self.phases,
            cell_kind=sc.experiment,
            progress=curve,
        )


def _scan(g: Guest, sc: ZfsScenario, cell: Cell, disks: pool.DiskSet) -> float:
    """Start the scrub or the replacements and wait for the end; guest-clock seconds."""
    if sc.experiment is Experiment.SCRUB:
        cmds = [["zpool", "scrub", pool.POOL], ["zpool", "wait", "-t", "scrub", pool.POOL]]
        return pool.timed(g, cmds, timeout=sc.timeout)
    cmds = []
    p = cell.pool
    for k, i in enumerate(sc.fault.disks):
        old = g.disk(disks.data[i].serial)
        if sc.fault.kind is faults.FaultKind.DETACH:
            cmds.append(["zpool", "offline", "-f", pool.POOL, old])
        seq = ["-s"] if sc.sequential else []  # sequential rebuild (mirror, dRAID)
        # Onto the k-th distributed spare (a sequential rebuild whatever -s says), or the
        # k-th new disk.
        new = p.spare_name(k) if p.distributed_spare else g.disk(disks.spares[k].serial)
        cmds.append(["zpool", "replace", *seq, pool.POOL, old, new])
    # Not only `resilver`: the old disk lingers under "replacing" until the swap is done.
    cmds.append(["zpool", "wait", "-t", "resilver,replace", pool.POOL])
    return pool.timed(g, cmds, timeout=sc.timeout)


def _store(st: store.Store, run_id: str, sc: ZfsScenario, rep: Rep, m: Measurement) -> None:
    s = m.scan
    p = m.cell.pool
    st.add_zfs_scan(
        run_id,
        repetition=m.repetition,
        kind=store.ScanKind(str(sc.experiment)),
        layout=str(p.layout),
        seconds=m.seconds,
        fill=m.fill,
        examined=s.examined,
        issued=s.issued,
        repaired=s.processed,
        errors=m.status.errors_json(),
        extra={
            "item": rep.id,
            "seconds_source": m.seconds_source,
            "scans": [
                {"start_ns": w.start_ns, "finish_ns": w.finish_ns, "seconds": w.seconds}
                for w in m.windows
            ],
            "expected_loss": int(m.expected_loss),
            "cell": {
                "layout": str(p.layout),
                "disks": p.disks,
                "disk_size": p.disk_size,
                "fill": m.fill_target,
                "ashift": p.ashift,
                "recordsize": p.recordsize,
                "cache": p.cache,
                "log": p.log,
                "load": m.cell.load,
                "media": str(p.media),
                "cache_media": str(p.cache_media),
                "sequential": sc.sequential,
                "draid_spares": p.draid_spares,
            },
            "disks": p.disks,
            "disk_size": p.disk_size,
            "fill_target": m.fill_target,
            "processed": s.processed,
            "scan_errors": s.errors,
            "data_errors": m.status.error_count,
            "pool_state": m.status.state,
            "outcome": str(m.outcome),
            "start_ns": m.window.start_ns,
            "finish_ns": m.window.finish_ns,
            "clock_tick_ns": m.tick_ns,
            "status_seconds": s.status_seconds,
            "wall_seconds": m.wall_seconds,
            "bytes_per_second": m.bytes_per_second,
            "zfs_version": m.zfs_version,
            "guest_kernel": m.guest_kernel,
            "fault": {
                **sc.fault.to_json(),
                "damage": [d.to_json() for d in m.damage],
                "written": m.written,
                "pool_alloc": m.pool_alloc,
                "events_dropped": m.events_dropped,
                "checksum_ereports": m.checksum_ereports,
            },
            "phases": {k: round(v, 3) for k, v in m.phases.items()},
            "progress": m.progress,
        },
    )


def overhead(ms: list[Measurement]) -> dict[str, float]:
    """Mean seconds per phase over the repetitions (boot, modprobe, fill, scan, ...)."""
    names: list[str] = []
    for m in ms:
        names += [k for k in m.phases if k not in names]
    return {k: statistics.fmean(m.phases.get(k, 0.0) for m in ms) for k in names}
