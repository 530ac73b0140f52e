"""One campaign element on a Dask worker: the worker's half of ``campaign_dask.py``.

``run`` is the Dask task. It checks that this host has the guest image the campaign
asked for (by recipe hash), runs the element in a child process
(``python -m harness.campaign.worker JOB.json``) into a scratch store of
this host, and returns an :class:`Attempt`: the run id, the error if the run did not
finish, and a snapshot of the scratch store for the caller to merge.

Why a child process: a Dask task runs in a worker thread, where the stall budget's
SIGALRM cannot be armed and a hung guest could not be stopped; a child has its own main
thread, and the task can stop it (SIGTERM is the child's KeyboardInterrupt, so the guest
is shut down and the run marked interrupted) past the budget.

Why a scratch store per (campaign, element) under ``~/.cache/crashlab/dask/``: nothing
is shared between hosts, and the scratch store and the run's directory outlive the
worker process. An element whose worker died, or that failed, and is tried again on
this host resumes its run where it stopped (the run lifecycle finds it), exactly as a
single-host campaign does; on another host it starts afresh.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from harness import paths, proc
from harness.errors import CommandTimeout
from harness.image import build
from harness.store.db import RunStatus, Store, canonical_json
from harness.store.merge import snapshot
from harness.vm import backend

# The child enforces the stall budget itself; this is the backstop if it cannot.
BACKSTOP = 120.0


@dataclass(frozen=True)
class Job:
    """What the caller sends for one attempt of one element."""

    campaign_id: str
    key: str  # the element's canonical JSON
    scenario: str
    overrides: tuple[str, ...]
    seed: int | None
    image_hash: str
    budget: float | None


@dataclass(frozen=True)
class Attempt:
    """What comes back: the run (``store`` holds it) or why there is none."""

    host: str  # the worker's address host, where the scratch run lives
    run_id: str | None
    error: str | None  # None: the run finished, with or without findings
    missing: str | None  # this worker cannot run any element (no image)
    store: bytes | None
    seconds: float


def scratch_dir(campaign_id: str, key: str | None = None) -> Path:
    d = paths.cache_dir() / "dask" / campaign_id
    return d / hashlib.sha256(key.encode()).hexdigest()[:16] if key else d


def probe(image_hash: str) -> str | None:
    """Why this host cannot run the campaign's elements, or None."""
    if any(img.hash == image_hash for img in build.all_cached()):
        return None
    return (
        f"{socket.gethostname()}: no guest image {image_hash} in {paths.images_dir()}"
        " (build it there with `scenario image build` in a checkout at the same recipe,"
        f" or copy {image_hash}/ from a host that has it)"
    )


def forget(campaign_id: str) -> None:
    """Remove a finished campaign's scratch stores from this host."""
    shutil.rmtree(scratch_dir(campaign_id), ignore_errors=True)


def _worker_host() -> str:
    from distributed import get_worker

    with contextlib.suppress(ValueError):
        return str(get_worker().address).split("://", 1)[-1].rsplit(":", 1)[0]
    return socket.gethostname()


def run(job: Job) -> Attempt:
    """The Dask task: one attempt of one element on this worker."""
    t0 = time.monotonic()
    host = _worker_host()
    if (why := probe(job.image_hash)) is not None:
        return Attempt(host, None, None, why, None, 0.0)
    d = scratch_dir(job.campaign_id, job.key)
    d.mkdir(parents=True, exist_ok=True)
    (d / "result.json").unlink(missing_ok=True)
    (d / "job.json").write_text(json.dumps(asdict(job)))
    argv: list[str | Path] = [
        sys.executable,
        "-m",
        "harness.campaign.worker",
        d / "job.json",
    ]
    error: str | None = None
    with proc.spawn(argv, output=d / "element.log", die_with_parent=True, grace=60) as child:
        try:
            child.wait(None if job.budget is None else job.budget + BACKSTOP)
        except CommandTimeout:
            error = f"timeout: stalled past its budget of {job.budget:.0f} s (stopped)"
    result = _read_result(d / "result.json")
    if error is None:
        error = result.get("error", "no result") if "run_id" in result else _died(child)
    run_id = result.get("run_id") or _run_of(d / "lab.sqlite", child.popen.pid)
    store = snapshot(d / "lab.sqlite") if run_id else None
    return Attempt(host, run_id, error, None, store, time.monotonic() - t0)


def _read_result(path: Path) -> dict[str, str | None]:
    try:
        out: dict[str, str | None] = json.loads(path.read_text())
        return out
    except (OSError, ValueError):
        return {}


def _died(child: proc.Child) -> str:
    tail = " | ".join(child.read_output().strip().splitlines()[-3:])
    # No output at all: its log could not be written either (a full disk, the soak finds).
    said = tail or "no output, and no result file"
    return f"HarnessError: the element's process exited {child.returncode}: {said}"[:1000]


def _run_of(db: Path, pid: int) -> str | None:
    """The run the child ``pid`` began or resumed, if it got that far; left ``running`` by
    a child that was stopped, it is marked interrupted (resumable) first."""
    if not db.exists():
        return None
    with Store.open(db, create=False) as st:
        found = st.run_of_process(pid, socket.gethostname())
        if found is None:
            return None
        run_id, status = found
        if status == RunStatus.RUNNING:
            st.finish_run(run_id, RunStatus.INTERRUPTED, {"error": "stopped by its worker"})
        return str(run_id)


# --- the child -------------------------------------------------------------------------


def _finished_earlier(db: Path, sc: Any, job: Job) -> str | None:
    """A run of this element that an earlier attempt finished here but whose result never
    reached the campaign (it was killed, or lost the scheduler, meanwhile): the result
    is that run, not a second one."""
    if not db.exists():
        return None
    with Store.open(db, create=False) as st:
        return st.finished_run(sc.name, canonical_json(sc.resolved()), sc.seed, job.image_hash)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.campaign.worker JOB.json``: run the element into
    the store beside JOB.json and write ``result.json`` there (run id, error)."""
    from harness.campaign.runner import failure
    from harness.config import scenario
    from harness.experiments import lifecycle

    path = Path((argv or sys.argv[1:])[0])
    job = Job(**json.loads(path.read_text()))
    os.environ["CRASHLAB_IMAGE"] = job.image_hash
    signal.signal(signal.SIGTERM, _interrupt)
    result: dict[str, str | None] = {"run_id": None, "error": None}
    try:
        sc = scenario.load(job.scenario, scenario.seeded(job.overrides, job.seed))
        backend.select(sc.backend, sc.libvirt_uri)
        db = path.parent / "lab.sqlite"
        result["run_id"] = _finished_earlier(db, sc, job)
        if result["run_id"] is None:
            report = lifecycle.execute(sc, db=db, budget=job.budget)
            result["run_id"] = report.run_id  # kept unfinished: the next attempt resumes it
            lifecycle.finished(report)
    except (lifecycle.Stalled, Exception) as e:
        result["error"] = failure(e, job.budget)
    except KeyboardInterrupt:
        result["error"] = "interrupted: its worker stopped the element"
    tmp = path.with_name("result.tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path.with_name("result.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
