"""Host checks on a Dask cluster: the same contiguous runs of the replay order as
``parallel.py``, each a Dask task, on a LocalCluster (``local:N``) or an existing
scheduler (``tcp://host:8786``).

Why Dask (``distributed``) and not more of ``parallel.py``: it already has what spreading
checks over hosts needs -- a scheduler, workers that join and leave, tasks rescheduled
when a worker dies, data moved to where it is needed -- and a researcher's lab may run
one already. What the lab adds is only what makes it correct:

* **No shared filesystem.** The log is scattered to the workers once (as bytes, keyed by
  its hash); a task writes it to its worker's scratch directory the first time it runs
  there and replays from that copy. Each task replays and checks its own run of states
  in a directory of its own, so two tasks on one worker never share an image.
* **One writer.** Tasks return results; only the caller (the run's process) commits them,
  one state at a time as today, so SQLite has one writer however many workers there are.
* **Nothing lost, nothing twice.** A worker that dies mid-task loses that task's results,
  never a committed one; the scheduler runs the task again elsewhere, and since only a
  finished task's results are yielded, no state is yielded twice. A task that kills
  workers every time ends as Dask's KilledWorker, a harness error (exit 3).
* **Small tasks.** Runs are cut finer than the workers (``TASKS_PER_WORKER``) so a lost
  worker costs little and a slow one does not hold the end of the run back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from harness import proc
from harness.check import host as check
from harness.check import parallel
from harness.config.crash import parse_dask_target as parse_target
from harness.errors import HarnessError, InputError
from harness.replay.crashstates import CrashState

TASKS_PER_WORKER = 4
# A scheduler on the lab's network answers in milliseconds; a wrong address should not
# keep the user waiting (distributed's own default is 30 s).
CONNECT_TIMEOUT = 5.0


@contextlib.contextmanager
def client(target: str) -> Iterator[Any]:
    """A Dask client for ``target`` (see ``parse_target``), closed on the way out.

    :raise InputError: no scheduler answers at ``target`` (``connect``).
    """
    kind, arg = parse_target(target)
    try:
        from distributed import Client, LocalCluster
    except ImportError as e:
        raise HarnessError(
            "--dask needs the 'distributed' package",
            detail=f"{e}; install it with: pip install -e '.[dask]'",
        ) from None
    # distributed sets its loggers to INFO when imported: two dozen lines of scheduler
    # chatter on every run's terminal, and at close a worker's heartbeat to the scheduler
    # it is closing with logs a traceback. A task's failure reaches us through its future;
    # --debug keeps everything.
    debug = logging.getLogger().isEnabledFor(logging.DEBUG)
    if not debug:
        logging.getLogger("distributed").setLevel(logging.ERROR)
    with contextlib.ExitStack() as stack:
        if kind == "local":
            with proc.quiet_start():
                cluster = stack.enter_context(
                    LocalCluster(
                        n_workers=arg,
                        threads_per_worker=1,
                        processes=True,
                        dashboard_address=None,
                        silence_logs=logging.DEBUG if debug else logging.CRITICAL,
                    )
                )
                c = stack.enter_context(Client(cluster))
                # Registered after the client, so it runs first: while the workers live.
                stack.callback(drop_scratch, c)
        else:
            c = stack.enter_context(connect(arg))
        yield c


async def _handshake(address: str) -> None:
    """Dask's handshake with ``address``, bounded: distributed bounds the TCP connect but
    not the first read, so a host that accepts and says nothing (a half-dead scheduler, a
    filtered port) held ``Client()`` forever."""
    from distributed.comm.core import connect as comm_connect

    comm = await asyncio.wait_for(comm_connect(address, timeout=CONNECT_TIMEOUT), CONNECT_TIMEOUT)
    await comm.close()


def require_scheduler(target: str) -> None:
    """A ``tcp://`` target (``check.dask``) answers, asked before a run records anything.

    :raise InputError: it does not (``connect``).
    """
    if target and parse_target(target)[0] == "tcp":
        connect(target).close()


def connect(address: str) -> Any:
    """A client of the scheduler at ``address``, within ``CONNECT_TIMEOUT``.

    :raise InputError: nothing answers there as a Dask scheduler does (exit 2, before
        anything is recorded): the address is the user's, and so is starting a scheduler.
    """
    from distributed import Client

    try:
        asyncio.run(_handshake(address))
        return Client(address, timeout=CONNECT_TIMEOUT)
    # Whatever answers: silence (OSError, TimeoutError), a refusal, or another service
    # whose reply distributed reads as a frame length (MemoryError for 3 EiB: an HTTP
    # proxy on the address). None of them is a scheduler.
    except Exception as e:
        host = address.split("://", 1)[1].rsplit(":", 1)[0]
        raise InputError(
            f"--dask {address}: no Dask scheduler answers there",
            detail="something answered, but not as a Dask scheduler does"
            if isinstance(e, MemoryError)
            else f"{type(e).__name__} within {CONNECT_TIMEOUT:.0f} s: {str(e)[:300] or '-'}",
            hint=f"start one on that host with `dask scheduler --host {host} --port"
            f" {address.rsplit(':', 1)[1]}` and a worker on each lab host with `dask worker"
            f" {address} --worker-port 8788 --nanny-port 8789` (docs/hosts.md),"
            " or use --dask local:N",
        ) from None


def host_checks(
    c: Any,
    log_path: Path,
    states: Sequence[CrashState],
    fs: str,
    size: int,
    timeout: float | None = None,
) -> Iterator[tuple[CrashState, check.CheckResult]]:
    """Yield (state, host check) for ``states``, one finished task at a time.

    The log is scattered again, and the runs not yet yielded submitted again, when the
    cluster lost it: Dask keeps one copy of scattered data however widely it was
    broadcast (its memory manager drops the others), cannot recompute it, and cancels
    every task that needs it when the worker holding it goes away (a cut link).
    """
    workers = max(1, len(c.scheduler_info().get("workers", {})))
    runs = dict(enumerate(parallel.split(states, workers * TASKS_PER_WORKER)))
    data = log_path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()[:16]
    by_id = {s.id: s for run in runs.values() for s in run}
    for attempt in range(1 + LOG_LOSSES):
        try:
            for i, results in _submitted(c, data, digest, runs, fs, size, timeout, attempt):
                del runs[i]  # before the yield: a run is never yielded twice
                for sid, result in results:
                    yield by_id[sid], result
            return
        except _LogLost:
            continue
    raise HarnessError(
        f"the Dask cluster lost the scattered log {LOG_LOSSES + 1} times",
        detail=f"{len(runs)} run(s) of states unchecked",
        hint="are workers leaving the cluster? `dask worker` logs say why",
    )


LOG_LOSSES = 3  # workers lost while they held the log, before the run gives up


class _LogLost(Exception):
    """The worker holding the scattered log left: its dependents were cancelled."""


def _submitted(
    c: Any,
    data: bytes,
    digest: str,
    runs: dict[int, list[CrashState]],
    fs: str,
    size: int,
    timeout: float | None,
    attempt: int,
) -> Iterator[tuple[int, list[tuple[str, check.CheckResult]]]]:
    """(index, results) of each of ``runs`` as its task finishes, the log scattered once.

    :raise _LogLost: the cluster lost the log (a task cancelled for want of it).
    """
    from distributed import as_completed
    from distributed.client import FutureCancelledError

    [log] = c.scatter([data], broadcast=True, hash=False)
    futures = {
        c.submit(
            _task,
            log,
            digest,
            [s.to_dict() for s in run],
            fs,
            size,
            timeout,
            key=f"crashlab-check-{digest}-{i}-{run[0].id}-{attempt}",
            pure=False,
        ): i
        for i, run in runs.items()
    }
    try:
        for fut in as_completed(futures):
            try:
                results = fut.result()
            except Exception as e:  # KilledWorker, a lost scheduler, a bug in a task
                if isinstance(e, FutureCancelledError) and log.status != "finished":
                    raise _LogLost from None
                raise HarnessError(
                    f"a Dask host-check task failed: {type(e).__name__}", detail=str(e)[-3000:]
                ) from None
            yield futures[fut], results
    finally:
        c.cancel(list(futures))
        c.cancel([log])


def scratch_dir() -> Path:
    """This worker's scratch directory: the logs it was sent, the runs' work directories.
    Named by the worker's pid, so ``scenario lab clean`` knows it is gone with it."""
    return Path(tempfile.gettempdir()) / f"crashlab-dask-{os.getpid()}"


def _drop_own_scratch() -> None:
    shutil.rmtree(scratch_dir(), ignore_errors=True)


def drop_scratch(c: Any) -> None:
    """Remove the scratch directories of ``c``'s workers: a local cluster's workers are
    ours and end with the run, and their logs (a log's size each) would stay in /tmp.
    A remote cluster's workers outlive the run and keep theirs for the next one."""
    with contextlib.suppress(Exception):  # a worker that is already gone has no say
        c.run(_drop_own_scratch, on_error="ignore")


def _task(
    data: bytes,
    digest: str,
    states: list[dict[str, Any]],
    fs: str,
    size: int,
    timeout: float | None,
) -> list[tuple[str, check.CheckResult]]:
    """What a worker runs: the log written locally once, then one run of states."""
    root = scratch_dir()
    root.mkdir(parents=True, exist_ok=True)
    log_path = root / f"{digest}.log"
    if not log_path.exists():
        tmp = log_path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(log_path)
    run = [CrashState.from_dict(d) for d in states]
    with tempfile.TemporaryDirectory(dir=root) as work:
        return [
            (s.id, r) for s, r in parallel.check_run(log_path, run, fs, size, Path(work), timeout)
        ]
