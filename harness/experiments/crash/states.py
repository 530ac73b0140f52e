"""Checking crash states of one or many recorded logs: replay each state, host-check it,
and mount it in a guest, with the guest batches filled across logs.

A crash-replay run has one log; a search run (``harness/experiments/search``) has one
per workload, each with its own oracle. Booting a check guest costs about as much as
checking ten states under TCG, so a batch takes states from as many workloads as it
needs to fill up: per-workload guests would spend most of a search booting.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness import paths
from harness.check import distributed, parallel
from harness.check import guest as guestcheck
from harness.check import host as check
from harness.config.crash import CheckSpec, CrashSpec, FsSpec
from harness.experiments import lifecycle
from harness.record import logwrites
from harness.replay import crashstates
from harness.replay import replayer as replay
from harness.replay.corrupt import zero_durable_block


@dataclass
class Source:
    """One recorded log and the states to check of it."""

    log: logwrites.Log
    states: list[crashstates.CrashState]
    oracle: dict[str, Any] = field(default_factory=dict)
    size: int = 0  # the device's size, bytes
    key: str = ""  # names its oracle in the guest; unique among a call's sources


Checked = tuple[crashstates.CrashState, list[check.CheckResult]]


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
    progress: lifecycle.Progress,
) -> Iterator[Checked]:
    """Yield each state of every source with its checks, the moment they are known."""
    sources = [s for s in sources if s.states]
    if not sources:
        return
    biggest = max(s.size for s in sources)
    # Images are sparse but up to `size` each: two workers plus a repair copy at most.
    with paths.fast_scratch(rdir, 3 * biggest) as fast:
        if not sc.check.guest:
            for src in sources:
                yield from _host_only(sc, fs, src, fast)
            return
        yield from _with_guests(sc, fs, sources, rdir, fast, progress)


def _host_only(sc: Scenario, fs: FsSpec, src: Source, fast: Path) -> Iterator[Checked]:
    """Host checks only: spread over every core, or over a Dask cluster."""
    ordered = replay.replay_order(src.states)
    timeout = sc.check.timeout
    if sc.check.dask:
        with distributed.client(sc.check.dask) as c:
            for state, result in distributed.host_checks(
                c, src.log.path, ordered, fs.type, src.size, timeout=timeout
            ):
                yield state, [result]
        return
    for state, result in parallel.host_checks(
        src.log.path, ordered, fs.type, src.size, fast / "host", timeout=timeout
    ):
        yield state, [result]


def _with_guests(
    sc: Scenario,
    fs: FsSpec,
    sources: Sequence[Source],
    rdir: Path,
    fast: Path,
    progress: lifecycle.Progress,
) -> Iterator[Checked]:
    """Replay (and host-check) states into image copies until a batch is full, then
    mount the batch in one guest."""
    batch_size = max(1, sc.check.guest_batch)
    total = sum(len(s.states) for s in sources)
    batch = _Batch(rdir / "batch")
    done = 0
    for src in sources:
        work_img = fast / "work.img"
        work_img.unlink(missing_ok=True)
        with replay.Replayer(src.log, work_img, src.size) as rp:
            for state in rp.walk(replay.replay_order(src.states)):
                progress(f"replay + host check ({fs.type})", done, total)
                host = (
                    parallel.checked(rp, fs.type, fast / "scratch", sc.check.timeout)
                    if sc.check.host
                    else None
                )
                batch.add(sc, fs, src, state, rp.image, host)
                if len(batch) >= batch_size:
                    progress(f"mounting {len(batch)} crash images in a guest", done, total)
                    done += len(batch)
                    yield from batch.check(fs, sc.check.timeout)
        work_img.unlink(missing_ok=True)
    if len(batch):
        progress(f"mounting {len(batch)} crash images in a guest", done, total)
        yield from batch.check(fs, sc.check.timeout)
    batch.close()


class _Batch:
    """Image copies waiting for a guest, with their host results and oracles."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._reset()

    def _reset(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.items: list[guestcheck.Item] = []
        self.states: dict[str, crashstates.CrashState] = {}
        self.host: dict[str, check.CheckResult] = {}
        self.oracles: dict[str, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self.items)

    def add(
        self,
        sc: Scenario,
        fs: FsSpec,
        src: Source,
        state: crashstates.CrashState,
        image: Path,
        host: check.CheckResult | None,
    ) -> None:
        copy = self.folder / f"{len(self.items)}.img"
        check.copy_image(image, copy)
        if sc.crash.corrupt == "zero-durable-block":
            zero_durable_block(copy, fs.type, src.oracle, state.mark, state.exact)
        self.items.append(guestcheck.Item(state.id, copy, state.mark, state.exact, src.key))
        self.states[state.id] = state
        if host is not None:
            self.host[state.id] = host
        if src.oracle:
            self.oracles[src.key] = src.oracle

    def check(self, fs: FsSpec, timeout: float) -> Iterator[Checked]:
        for sid, guest_result in guestcheck.check_batch(
            self.items, fs, self.oracles, timeout=timeout
        ):
            results = [r for r in (self.host.get(sid), guest_result) if r is not None]
            yield self.states[sid], results
        self._reset()

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
