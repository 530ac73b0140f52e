"""Checking crash states of one or many recorded logs: replay each state, host-check it,
and mount it in a guest, with the guest batches filled across logs.

A crash-replay run has one log; a search run (``harness/experiments/search``) has one
per workload, each with its own oracle. Booting a check guest costs about as much as
checking ten states under TCG, so a batch takes states from as many workloads as it
needs to fill up: per-workload guests would spend most of a search booting.

Every distinct state is checked once (``reuse.py`` says when two are the same check):
given a :class:`Reuse`, a state whose image and check key were judged before -- earlier
in this call, or in any run of the store -- is not checked again but takes that verdict,
its results marked ``reused``; one whose twin is still being checked waits for it. A
harness outcome is never passed on: the twins waiting behind it are checked themselves.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

from harness import paths
from harness.check import distributed, pair, parallel
from harness.check import guest as guestcheck
from harness.check import host as check
from harness.config.crash import CheckSpec, CrashSpec, FsSpec
from harness.crashstate import guestpool
from harness.crashstate import reuse as reuse_
from harness.crashstate.run import Progress
from harness.errors import HarnessError
from harness.model import oracle
from harness.outcome import Outcome, is_harness, reduce
from harness.record import logwrites
from harness.replay import crashstates
from harness.replay import replayer as replay
from harness.replay.corrupt import zero_durable_block
from harness.store.model import CheckRow, Promise

T = TypeVar("T")


@dataclass(frozen=True)
class SecondLog:
    """``fs.devices = 2``: the journal's or log's own device, recorded in a log of its own
    with the same marks. A state of the filesystem's log cut exactly at a mark pairs with
    this log cut at the same mark: both devices as a power cut at that moment left them,
    each with what its own flushes covered (harness/replay/multicrash.py's consistent
    cut). Cuts between marks would need an order between the logs that no log keeps."""

    log: logwrites.Log
    size: int

    def state(self, state: crashstates.CrashState) -> crashstates.CrashState:
        """The log device's state paired with ``state``.

        :raise HarnessError: ``state`` is not cut exactly at a mark both logs have.
        """
        at = {text: i for i, text in self.log.marks.items()}
        if not state.exact or state.mark not in at:
            raise HarnessError(
                f"crash state {state.id} is not cut at a mark of the log device's log",
                detail=f"mark {state.mark!r}, exact {state.exact}",
            )
        prefix = at[state.mark] + 1
        h = self.log.hash
        sid = crashstates.state_id(h, prefix, (), None, ())
        return crashstates.CrashState(sid, h, prefix, mark=state.mark, generator="mark")

    def image(self, state: crashstates.CrashState, out: Path) -> Path:
        """The log device's image paired with ``state``, built at ``out``."""
        out.unlink(missing_ok=True)
        return replay.materialize(self.log, self.state(state), out, self.size)


@dataclass
class Source:
    """One recorded log and the states to check of it."""

    log: logwrites.Log
    states: list[crashstates.CrashState]
    oracle: dict[str, Any] = field(default_factory=dict)
    size: int = 0  # the device's size, bytes
    key: str = ""  # names its oracle in the guest; unique among a call's sources
    # Its states are judged as this state is: the oracle's requirement at its last mark
    # (exact or not). A recovery log's states (recoverycrash.py) must still satisfy the
    # cut whose recovery they interrupt; their own marks say nothing to the oracle.
    judged_as: crashstates.CrashState | None = None
    second_device: SecondLog | None = None

    def judge(self, state: crashstates.CrashState) -> crashstates.CrashState:
        """The state whose mark and exactness the oracle reads for ``state``."""
        return self.judged_as or state


class Checked(NamedTuple):
    """A state with its checks; with reuse, its image identity, its check key and, if it
    took an earlier verdict, whose ("run_id/state_id")."""

    state: crashstates.CrashState
    results: list[check.CheckResult]
    identity: str | None = None
    check_key: str | None = None
    reused_from: str | None = None


class Scenario(Protocol):
    """What checking needs of a scenario: a crash kind's or a search kind's."""

    @property
    def check(self) -> CheckSpec: ...

    @property
    def crash(self) -> CrashSpec: ...


def check_sources(
    sc: Scenario,
    fs: FsSpec,
    sources: Sequence[Source],
    rdir: Path,
    progress: Progress,
    reuse: reuse_.Reuse | None = None,
    on_cut: Callable[[Source, float], None] | None = None,
) -> Iterator[Checked]:
    """Yield each state of every source with its checks, the moment they are known;
    with ``reuse``, a state judged before (same image, same check key) with the verdict
    it took instead of checks. ``on_cut`` hears, per source checked with guests, the
    seconds its replay walk took (cutting its states, host checks excluded)."""
    sources = [s for s in sources if s.states]
    if not sources:
        return
    ledger = _Ledger(reuse)
    biggest = max(s.size for s in sources)
    # Images are sparse but up to `size` each: two workers plus a repair copy at most.
    with paths.fast_scratch(rdir, 3 * biggest) as fast:
        if not sc.check.guest:
            for src in sources:
                yield from _host_only(sc, fs, src, fast, ledger)
            return
        yield from _with_guests(sc, fs, sources, rdir, fast, progress, ledger, on_cut)


class _Ledger:
    """Which (check key, identity) pairs are judged, which are being checked, and the
    twins waiting for those."""

    def __init__(self, reuse: reuse_.Reuse | None) -> None:
        self.reuse = reuse
        self._judged: dict[tuple[str, str], tuple[str, list[check.CheckResult]]] = {}
        self._waiting: dict[tuple[str, str], list[tuple[Checked, Source]]] = {}

    @property
    def active(self) -> bool:
        return self.reuse is not None

    def tag(self, src: Source, state: crashstates.CrashState, identity: str | None) -> Checked:
        if self.reuse is None or identity is None:
            return Checked(state, [])
        key = reuse_.check_key(self.reuse.context, src.oracle, src.judge(state), src.size)
        return Checked(state, [], identity, key)

    @staticmethod
    def _pair(t: Checked) -> tuple[str, str] | None:
        return None if t.check_key is None or t.identity is None else (t.check_key, t.identity)

    def earlier(self, t: Checked) -> Checked | None:
        """``t`` with the verdict of its judged twin, if it has one."""
        pair = self._pair(t)
        if pair is None or self.reuse is None:
            return None
        if pair in self._judged:
            ref, results = self._judged[pair]
            return _reused(t, ref, results)
        found = self.reuse.judged(*pair) if self.reuse.judged else None
        if found is None:
            return None
        self._judged[pair] = (found.ref, [_from_row(c, found.promise) for c in found.checks])
        return _reused(t, found.ref, self._judged[pair][1])

    def waits(self, t: Checked, src: Source) -> bool:
        """Whether ``t``'s twin is being checked (``t`` then waits for it); if not, ``t``
        is the one being checked from now on."""
        pair = self._pair(t)
        if pair is None:
            return False
        if pair in self._waiting:
            self._waiting[pair].append((t, src))
            return True
        self._waiting[pair] = []
        return False

    def done(
        self, t: Checked, results: list[check.CheckResult]
    ) -> tuple[list[Checked], list[tuple[Checked, Source]]]:
        """``t`` checked: it and its waiting twins (reused) to yield, and the twins to
        check themselves because ``t``'s outcome was the lab's, not the image's."""
        t = t._replace(results=results)
        pair = self._pair(t)
        if pair is None:
            return [t], []
        twins = self._waiting.pop(pair, [])
        if is_harness(reduce(r.outcome for r in results)):
            return [t], twins
        assert self.reuse is not None
        ref = f"{self.reuse.run_id}/{t.state.id}"
        self._judged[pair] = (ref, results)
        return [t, *(_reused(w, ref, results) for w, _ in twins)], []


def _reused(t: Checked, ref: str, earlier: Sequence[check.CheckResult]) -> Checked:
    """``t`` with its twin's results, each marked: checker ``reused``, the same outcome,
    the output naming the state checked. Recovery times were not measured again."""
    results = [
        replace(
            r,
            checker="reused",
            exit_status=None,
            seconds=0.0,
            output=f"reused from {ref} ({r.checker}): {r.outcome}\n{r.output}".strip(),
            phases={},
            note="",
        )
        for r in earlier
    ]
    return t._replace(results=results, reused_from=ref)


def _from_row(c: CheckRow, promise: Promise | None) -> check.CheckResult:
    """A stored check as a result; the guest's with the stored profile, promise and rule
    (the note they were read from is not kept)."""
    r = check.CheckResult(
        c.stage, c.checker, Outcome(c.outcome), c.exit_status, c.seconds, c.output
    )
    if promise is None or c.stage != "guest":
        return r
    p = promise
    return replace(r, profile=p.profile or "", promise=p.broken or "", rule=p.rule or "")


def _identities(src: Source, fast: Path, ledger: _Ledger) -> list[Checked]:
    """Every state of ``src`` tagged with its image identity: one replay, no check."""
    image = fast / "identity.img"
    image.unlink(missing_ok=True)
    try:
        with replay.Replayer(src.log, image, src.size, identity=True) as rp:
            return [ledger.tag(src, state, rp.identity) for state in rp.walk(src.states)]
    finally:
        image.unlink(missing_ok=True)


def _host_only(
    sc: Scenario, fs: FsSpec, src: Source, fast: Path, ledger: _Ledger
) -> Iterator[Checked]:
    """Host checks only: spread over every core, or over a Dask cluster. With reuse, the
    states are tagged by one replay first, so only one of each twin set is checked."""
    todo = _identities(src, fast, ledger) if ledger.active else [Checked(s, []) for s in src.states]
    while todo:
        fresh: dict[str, Checked] = {}
        for t in todo:
            if (earlier := ledger.earlier(t)) is not None:
                yield earlier
            elif not ledger.waits(t, src):
                fresh[t.state.id] = t
        todo = []  # the twins of a state whose check the lab failed: checked next round
        for state, result in _host_checks(sc, fs, src, [t.state for t in fresh.values()], fast):
            ready, again = ledger.done(fresh[state.id], [result])
            yield from ready
            todo += [t for t, _ in again]


def _host_checks(
    sc: Scenario, fs: FsSpec, src: Source, states: list[crashstates.CrashState], fast: Path
) -> Iterator[tuple[crashstates.CrashState, check.CheckResult]]:
    ordered = replay.replay_order(states)
    timeout = sc.check.timeout
    if sc.check.dask:
        with distributed.client(sc.check.dask) as c:
            yield from distributed.host_checks(
                c, src.log.path, ordered, fs.type, src.size, timeout=timeout
            )
        return
    yield from parallel.host_checks(
        src.log.path, ordered, fs.type, src.size, fast / "host", timeout=timeout
    )


def _with_guests(
    sc: Scenario,
    fs: FsSpec,
    sources: Sequence[Source],
    rdir: Path,
    fast: Path,
    progress: Progress,
    ledger: _Ledger,
    on_cut: Callable[[Source, float], None] | None = None,
) -> Iterator[Checked]:
    """Replay (and host-check) states into image copies until a batch is full, then
    mount the batch in a guest (``check.guests`` of them at once). A state judged before
    is yielded at once, one whose twin is in a batch when the twin's verdict is known."""
    cpus = guestpool.vcpus(sc.check.guests)
    total = sum(len(s.states) for s in sources)
    pairs = any(s.second_device for s in sources)  # two disks a state
    wanted = sc.check.guest_batch // 2 if pairs else sc.check.guest_batch
    if pairs and (made := fs.second_device) and made.alone:
        wanted = 1  # one filesystem id a guest (filesystems.SecondDevice.alone)
    batch_size = guestpool.batch_size(max(1, wanted), cpus, total, sc.check.guests)
    done = [0]

    def new_batch(n: int) -> _Batch:
        return _Batch(rdir / f"batch-{n}", fs, sc.check.timeout, cpus, sc.check)

    def settle(back: Iterator[tuple[Checked, list[check.CheckResult]]]) -> Iterator[Checked]:
        """Guests' verdicts through the ledger; the twins of a state whose check the lab
        failed go into the open batch, their images rebuilt from the log (rare)."""
        for t, results in back:
            ready, orphans = ledger.done(t, results)
            done[0] += len(ready)
            yield from ready
            for w, src in orphans:
                if not ledger.waits(w, src):
                    _add_rebuilt(sc, fs, src, w, fast, pool.open)

    def mounting() -> None:
        progress(f"mounting {len(pool.open)} crash images in a guest", done[0], total)

    pool: guestpool.GuestPool[_Batch, tuple[Checked, list[check.CheckResult]]]
    with guestpool.GuestPool(sc.check.guests, new_batch) as pool:
        for src in sources:
            work_img = fast / "work.img"
            work_img.unlink(missing_ok=True)
            cut = [0.0]
            with replay.Replayer(src.log, work_img, src.size, identity=ledger.active) as rp:
                for state in _timed(rp.walk(replay.replay_order(src.states)), cut):
                    progress(f"replay + host check ({fs.type})", done[0], total)
                    yield from settle(pool.ready())
                    sd = src.second_device
                    ld = sd.image(state, fast / "ld.img") if sd else None
                    identity = _identity(rp, ld) if ledger.active else None
                    t = ledger.tag(src, state, identity)
                    if (earlier := ledger.earlier(t)) is not None:
                        done[0] += 1
                        yield earlier
                        continue
                    if ledger.waits(t, src):
                        continue
                    host = _host(sc, fs, rp, ld, fast / "scratch") if sc.check.host else None
                    pool.open.add(sc, fs, src, t, rp.image, host, ld)
                    if len(pool.open) >= batch_size:
                        mounting()
                        yield from settle(pool.submit())
            work_img.unlink(missing_ok=True)
            if on_cut is not None:
                on_cut(src, cut[0])
        mounting()
        yield from settle(pool.finish())


def _identity(rp: replay.Replayer, image2: Path | None) -> str:
    """The state's image identity; with a log device, of both images together."""
    if image2 is None:
        return rp.identity
    return replay.combined(rp.identity, replay.image_digest(image2))


def _host(
    sc: Scenario, fs: FsSpec, rp: replay.Replayer, image2: Path | None, scratch: Path
) -> check.CheckResult:
    if image2 is None:
        return parallel.checked(rp, fs.type, scratch, sc.check.timeout)
    return pair.host_check(fs.type, rp.image, image2, scratch, timeout=sc.check.timeout)


def _timed(it: Iterator[T], spent: list[float]) -> Iterator[T]:
    """``it``, adding to ``spent[0]`` the seconds each next item took to come."""
    while True:
        t = time.monotonic()
        try:
            item = next(it)
        except StopIteration:
            spent[0] += time.monotonic() - t
            return
        spent[0] += time.monotonic() - t
        yield item


def _add_rebuilt(
    sc: Scenario, fs: FsSpec, src: Source, t: Checked, fast: Path, batch: _Batch
) -> None:
    image = fast / "rebuilt.img"
    image.unlink(missing_ok=True)
    ld = src.second_device.image(t.state, fast / "rebuilt-ld.img") if src.second_device else None
    try:
        replay.materialize(src.log, t.state, image, src.size)
        host = None
        if sc.check.host and ld:
            host = pair.host_check(fs.type, image, ld, fast / "scratch", timeout=sc.check.timeout)
        elif sc.check.host:
            host = check.host_check(fs.type, image, fast / "scratch", timeout=sc.check.timeout)
        batch.add(sc, fs, src, t, image, host, ld)
    finally:
        image.unlink(missing_ok=True)


class _Batch:
    """Image copies waiting for a guest, with their host results and oracles."""

    def __init__(
        self,
        folder: Path,
        fs: FsSpec,
        timeout: float,
        cpus: int = 2,
        spec: CheckSpec | None = None,
    ) -> None:
        self.folder = folder
        self.fs = fs
        self.timeout = timeout
        self.cpus = cpus
        spec = spec or CheckSpec()
        self.modes = spec.recovery  # recovery modes beside rw (model/recovery.py)
        self.times = spec.times  # rule 20 judged, or the oracle sent without its clocks
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.items: list[guestcheck.Item] = []
        self.states: dict[str, Checked] = {}
        self.host: dict[str, check.CheckResult] = {}
        self.oracles: dict[str, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self.items)

    def add(
        self,
        sc: Scenario,
        fs: FsSpec,
        src: Source,
        t: Checked,
        image: Path,
        host: check.CheckResult | None,
        image2: Path | None = None,
    ) -> None:
        state, judge = t.state, src.judge(t.state)
        copy = self.folder / f"{len(self.items)}.img"
        check.copy_image(image, copy)
        if sc.crash.corrupt == "zero-durable-block":
            zero_durable_block(copy, fs.type, src.oracle, judge.mark, judge.exact)
        log_copy = None
        if image2 is not None:
            log_copy = self.folder / f"{len(self.items)}.log.img"
            check.copy_image(image2, log_copy)
        self.items.append(
            guestcheck.Item(state.id, copy, judge.mark, judge.exact, src.key, log_copy)
        )
        self.states[state.id] = t
        if host is not None:
            self.host[state.id] = host
        if src.oracle:
            keep = self.times or "marks" not in src.oracle  # fio's blocks have no times
            self.oracles[src.key] = src.oracle if keep else oracle.untimed(src.oracle)

    def check(self) -> Iterator[tuple[Checked, list[check.CheckResult]]]:
        for sid, guest_results in guestcheck.check_batch(
            self.items, self.fs, self.oracles, timeout=self.timeout, cpus=self.cpus,
            modes=self.modes,
        ):  # fmt: skip
            host = self.host.get(sid)
            yield self.states[sid], [*([host] if host else []), *guest_results]

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
