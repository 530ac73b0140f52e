"""Host checks on every core: the states split into contiguous runs of the replay order,
one worker process per run, each with its own working image.

A host check is a pure function of (crash state, its image) — ``check.host_check`` leaves
the image as it found it — so any split is correct; contiguous runs keep each worker's
replay incremental (one full replay per worker to reach its first state, then only
deltas). The same split is what a Dask scale-out would map over.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from harness import proc
from harness.check import host as check
from harness.errors import HarnessError
from harness.outcome import is_harness
from harness.record import logwrites
from harness.replay import replayer as replay
from harness.replay.crashstates import CrashState

# A worker that says nothing for this long is hung (one check takes well under a second
# on CI-sized images; a 1 GiB xfs_repair a few seconds).
SILENCE_TIMEOUT = 600.0


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def split(states: Sequence[CrashState], workers: int) -> list[list[CrashState]]:
    """Contiguous runs of the replay order, as even as possible."""
    ordered = replay.replay_order(states)
    workers = max(1, min(workers, len(ordered)))
    size, extra = divmod(len(ordered), workers)
    runs, start = [], 0
    for i in range(workers):
        end = start + size + (1 if i < extra else 0)
        runs.append(ordered[start:end])
        start = end
    return [r for r in runs if r]


def check_run(
    log_path: Path,
    states: Sequence[CrashState],
    fs: str,
    size: int,
    workdir: Path,
    timeout: float | None = None,
) -> Iterator[tuple[CrashState, check.CheckResult]]:
    """Replay and host-check ``states`` in one process (what each worker does)."""
    workdir.mkdir(parents=True, exist_ok=True)
    image = workdir / "work.img"
    image.unlink(missing_ok=True)
    try:
        with logwrites.open_log(log_path) as lg, replay.Replayer(lg, image, size) as rp:
            for state in rp.walk(states):
                yield state, checked(rp, fs, workdir / "scratch", timeout)
    finally:
        image.unlink(missing_ok=True)


def checked(
    rp: replay.Replayer, fs: str, scratch: Path, timeout: float | None
) -> check.CheckResult:
    """Host-check the replayer's current state; a checker that was killed or failed may
    have left the image changed, so the replayer starts afresh after it."""
    result = check.host_check(fs, rp.image, scratch, timeout=timeout, changes=rp.changes())
    if is_harness(result.outcome):
        rp.distrust()
    return result


def host_checks(
    log_path: Path,
    states: Sequence[CrashState],
    fs: str,
    size: int,
    workdir: Path,
    workers: int | None = None,
    timeout: float | None = None,
) -> Iterator[tuple[CrashState, check.CheckResult]]:
    """Yield (state, host check) as each is known, from ``workers`` processes; each
    checker command gets ``timeout`` seconds."""
    runs = split(states, workers or default_workers())
    if len(runs) <= 1:
        run = runs[0] if runs else []
        yield from check_run(log_path, run, fs, size, workdir / "w0", timeout)
        return
    ctx = mp.get_context("fork")
    q: Any = ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker,
            args=(log_path, [s.to_dict() for s in run], fs, size, workdir / f"w{i}", timeout, q),
            daemon=True,
        )
        for i, run in enumerate(runs)
    ]
    by_id = {s.id: s for run in runs for s in run}
    with proc.quiet_start():  # forked deaf to Ctrl-C: the parent stops its workers
        for p in procs:
            p.start()
    try:
        remaining = len(by_id)
        while remaining:
            try:
                msg = q.get(timeout=SILENCE_TIMEOUT)
            except queue.Empty:
                raise HarnessError(
                    f"a host-check worker said nothing for {SILENCE_TIMEOUT:g} s: a hang"
                ) from None
            if msg[0] == "error":
                raise HarnessError(f"host-check worker failed: {msg[1]}", detail=msg[2])
            _, sid, result = msg
            remaining -= 1
            yield by_id[sid], result
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(timeout=10)


def _worker(
    log_path: Path,
    states: list[dict[str, Any]],
    fs: str,
    size: int,
    workdir: Path,
    timeout: float | None,
    q: Any,
) -> None:
    proc.end_with_parent()
    try:
        run = [CrashState.from_dict(d) for d in states]
        for state, result in check_run(log_path, run, fs, size, workdir, timeout):
            q.put(("result", state.id, result))
    except BaseException as e:  # reported to the parent, which raises it as a harness error
        import traceback

        q.put(("error", f"{type(e).__name__}: {e}", traceback.format_exc()[-3000:]))
