"""Campaign elements as Dask tasks (``scenario campaign run FILE --dask``): a worker's run
is merged into the one store by one transaction that only adds; on a real `dask
scheduler` with two `dask worker` processes, one killed mid-campaign, every element ends
done with one run and no row twice; a worker without the image and an unreachable
scheduler stop the campaign with exit 3. The campaign with real guests is marked ``vm``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import cloudpickle
import dask
import distributed.config  # its defaults in dask.config first (see dask.config.set below)
import pytest
import test_store
from test_dask import BIN, not_a_scheduler, scheduler  # noqa: F401 -- the fixture
from test_store import check, new_run, state

from harness import paths
from harness.campaign import on_dask as campaign_dask
from harness.campaign import worker as campaign_worker
from harness.campaign.runner import ElementStatus
from harness.campaign.worker import Attempt, Job
from harness.check import distributed
from harness.config import campaign as config_campaign
from harness.errors import HarnessError
from harness.outcome import Outcome
from harness.store.db import RunStatus, Store
from harness.store.merge import snapshot

REPO = paths.REPO
# What the stand-in task calls from tests/ travels by value too.
cloudpickle.register_pickle_by_value(test_store)


def verdicts(st: Store, run_id: str) -> dict[str, str]:
    rows = st.execute("SELECT state_id, outcome FROM verdicts WHERE run_id = ?", (run_id,))
    return {str(s): str(o) for s, o in rows}


def test_a_merge_only_adds(tmp_path: Path) -> None:
    scratch, snap = tmp_path / "scratch.sqlite", tmp_path / "snap.sqlite"
    with Store.open(scratch) as src:
        run_id = new_run(src)
        src.record_state_result(run_id, state(0), [check()], {"mount": 1.0})
        src.record_state_result(run_id, state(1), [check(Outcome.TIMEOUT)], {})
        src.finish_run(run_id, RunStatus.FAILED, {"error": "the guest hung"})
    snap.write_bytes(snapshot(scratch))
    with Store.open(tmp_path / "lab.sqlite") as st:
        assert st.merge_run(snap, run_id) > 0
        assert st.merge_run(snap, run_id) == 0  # the same run twice adds nothing
        assert verdicts(st, run_id) == {"fua-0000": "consistent", "fua-0001": "timeout"}
        # The run resumed and finished on the worker: state 1 checked for real now.
        with Store.open(scratch) as src:
            src.resume_run(run_id)
            src.record_state_result(run_id, state(1), [check(Outcome.DATA_LOSS)], {})
            src.record_state_result(run_id, state(2), [check()], {})
            src.finish_run(run_id, RunStatus.DONE, {})
        snap.write_bytes(snapshot(scratch))
        with sqlite3.connect(snap) as c:  # ... and a later harness outcome of state 0
            c.execute("UPDATE verdicts SET outcome = 'timeout' WHERE state_id = 'fua-0000'")
        st.merge_run(snap, run_id)
        assert verdicts(st, run_id) == {
            "fua-0000": "consistent",  # a harness outcome never overwrites a verdict
            "fua-0001": "data_loss",  # ... and gives way to one
            "fua-0002": "consistent",
        }
        [(checks,)] = st.execute("SELECT count(*) FROM checks WHERE run_id = ?", (run_id,))
        assert checks == 3 and st.run(run_id).status == RunStatus.DONE
        assert st.merge_run(snap, run_id) == 0
        # The bookkeeping goes in the same transaction: if it fails, nothing is added.
        with Store.open(scratch) as src:
            other = new_run(src)
        snap.write_bytes(snapshot(scratch))
        with pytest.raises(sqlite3.OperationalError):
            st.merge_run(snap, other, [("UPDATE no_such_table SET x = 1", ())])
        assert not st.execute("SELECT 1 FROM runs WHERE id = ?", (other,))


# --- on a real cluster, with a stand-in for the guest --------------------------------------


def stand_in() -> Callable[[Job], Attempt]:
    """A Dask task that writes a run into its worker's scratch store as ``campaign_worker``
    does, without a guest: slow enough for a worker to be killed under it. A local function,
    so Dask ships it by value (the scheduler and the workers cannot import tests/)."""

    def task(job: Job) -> Attempt:
        d = campaign_worker.scratch_dir(job.campaign_id, job.key)
        d.mkdir(parents=True, exist_ok=True)
        time.sleep(2.0)
        with Store.open(d / "lab.sqlite") as st:
            run_id = new_run(st, seed=job.seed, params={"key": job.key})
            for i in range(3):
                st.record_state_result(run_id, state(i), [check()], {})
            st.finish_run(run_id, RunStatus.DONE, {})
        return Attempt("127.0.0.1", run_id, None, None, snapshot(d / "lab.sqlite"), 2.0)

    return task


def fake_cache(root: Path) -> Path:
    """A cache whose image directory has the current recipe's image (empty files): what
    the workers' probe looks for."""
    img = root / "images" / campaign_dask.image_hash()
    img.mkdir(parents=True)
    for f in ("rootfs.qcow2", "vmlinuz", "initrd.img"):
        (img / f).write_bytes(b"")
    (img / "manifest.json").write_text(json.dumps({"recipe_hash": img.name}))
    return root


def worker(address: str, cache: Path | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, **({"CRASHLAB_CACHE": str(cache)} if cache else {})}
    return subprocess.Popen(
        [BIN / "dask", "worker", address, "--nworkers", "1", "--nthreads", "1",
         "--no-dashboard", "--host", "127.0.0.1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env,
    )  # fmt: skip


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for w in started:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
            w.wait(timeout=30)


def small_campaign(tmp_path: Path, repetitions: int, *sets: str) -> Path:
    """ext2-fsync with host checks only, ``repetitions`` seeds: the smallest elements."""
    f = tmp_path / "dask.toml"
    quoted = ", ".join(f'"{s}"' for s in ("check.guest=false", "crash.max_states=4", *sets))
    f.write_text(
        f'[[run]]\nscenario = "ext2-fsync"\nrepetitions = {repetitions}\nset = [{quoted}]\n'
    )
    return f


def duplicates(db: Path) -> int:
    with Store.open(db, create=False) as st:
        rows = st.execute(
            "SELECT (SELECT count(*) - count(DISTINCT run_id || '/' || state_id) FROM verdicts)"
            " + (SELECT count(*) - count(DISTINCT run_id || '/' || state_id || '/' || checker)"
            " FROM checks) + (SELECT coalesce(sum(n - 1), 0) FROM"
            " (SELECT count(*) AS n FROM runs GROUP BY scenario, params, seed))"
        )
    return int(rows[0][0])


class KillOnFirst:
    """A view that SIGKILLs a worker (and its children) when the first element is done."""

    def __init__(self, victim: subprocess.Popen[bytes]):
        self.victim, self.killed_at = victim, 0

    def start(self, *a: object) -> None: ...
    def element(self, *a: object) -> None: ...
    def progress(self, *a: object) -> None: ...

    def finished(self, row: object, eta: float) -> None:
        if not self.killed_at:
            os.killpg(self.victim.pid, signal.SIGKILL)
            self.killed_at = time.monotonic()


def test_a_worker_killed_mid_campaign_loses_nothing(
    tmp_path: Path,
    scheduler: str,  # noqa: F811 -- the fixture
    workers: list[subprocess.Popen[bytes]],
) -> None:
    cache = fake_cache(tmp_path / "cache")
    workers += [worker(scheduler, cache), worker(scheduler, cache)]
    camp = config_campaign.load(small_campaign(tmp_path, 6))
    db = tmp_path / "lab.sqlite"
    view = KillOnFirst(workers[0])
    with distributed.client(scheduler) as c:
        c.wait_for_workers(2, timeout=60)
        engine = campaign_dask.DaskEngine(camp, db, c, view=view, task=stand_in())
        report = engine.run()
    assert workers[0].wait(timeout=30) == -signal.SIGKILL and view.killed_at
    errors = [r.last_error for r in report.rows]
    assert [r.status for r in report.rows] == [ElementStatus.DONE] * 6, errors
    assert all(r.failures == r.interruptions == 0 for r in report.rows)
    with Store.open(db, create=False) as st:
        [(runs, states)] = st.execute("SELECT count(*), (SELECT count(*) FROM verdicts) FROM runs")
    assert runs == 6 and states == 18 and duplicates(db) == 0
    assert {r.run_id for r in report.rows} == set(
        str(x[0]) for x in sqlite3.connect(db).execute("SELECT id FROM runs")
    )


def test_a_killed_campaign_resumes_where_it_stopped(
    tmp_path: Path,
    scheduler: str,  # noqa: F811 -- the fixture
    workers: list[subprocess.Popen[bytes]],
) -> None:
    """SIGKILL the campaign's process (the one writer) once an element is done; run it
    again: the finished elements stay, the ones it had on workers count an interruption
    and run again, nothing is twice."""
    cache = fake_cache(tmp_path / "cache")
    workers += [worker(scheduler, cache), worker(scheduler, cache)]
    f, db = small_campaign(tmp_path, 6), tmp_path / "lab.sqlite"
    script = textwrap.dedent(f"""
        import sys; sys.path[:0] = [{str(REPO)!r}, {str(REPO / "tests")!r}]
        from pathlib import Path
        from test_campaign_dask import stand_in
        from harness.check import distributed
        from harness.config import campaign
        from harness.campaign.on_dask import DaskEngine
        with distributed.client({scheduler!r}) as c:
            c.wait_for_workers(2, timeout=60)
            DaskEngine(campaign.load(Path({str(f)!r})), Path({str(db)!r}), c,
                       task=stand_in()).run()
    """)
    first = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None:
        with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(db)) as c:
            if c.execute("SELECT 1 FROM campaign_elements WHERE status = 'done'").fetchall():
                break
        time.sleep(0.2)
    first.kill()
    assert first.wait(timeout=30) == -signal.SIGKILL
    with Store.open(db, create=False) as st:
        before = dict(st.execute("SELECT key, run_id FROM campaign_elements WHERE status = 'done'"))
        [(running,)] = st.execute("SELECT count(*) FROM campaign_elements WHERE status = 'running'")
    assert 0 < len(before) < 6 and running
    with distributed.client(scheduler) as c:
        report = campaign_dask.DaskEngine(config_campaign.load(f), db, c, task=stand_in()).run()
    assert report.resumed and [r.status for r in report.rows] == [ElementStatus.DONE] * 6
    assert sum(r.interruptions for r in report.rows) == running
    assert all(before[r.element.key] == r.run_id for r in report.rows if r.element.key in before)
    with Store.open(db, create=False) as st:
        [(runs,)] = st.execute("SELECT count(*) FROM runs")
    assert runs == 6 and duplicates(db) == 0


def failing(why: str | None) -> Callable[[Job], Attempt]:
    """A task that fails its element (``why``), or, with None, kills its worker."""

    def task(job: Job) -> Attempt:
        if why is None:
            os._exit(9)
        return Attempt("127.0.0.1", None, why, None, None, 0.1)

    return task


def test_failures_and_dead_workers_keep_their_meaning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """max_failures and max_interruptions quarantine as on one host: a failed attempt is a
    failure, a task that kills its worker every time (KilledWorker) an interruption."""
    monkeypatch.setenv("CRASHLAB_CACHE", str(fake_cache(tmp_path / "cache")))
    f = small_campaign(tmp_path, 1)
    f.write_text("max_failures = 2\nmax_interruptions = 2\n" + f.read_text())
    camp, db = config_campaign.load(f), tmp_path / "lab.sqlite"
    # distributed's defaults are in dask.config from the import above: a set made before
    # them would drop the whole "distributed" section on exit (KeyError in the next test
    # of the same process, seen with xdist's other order).
    once = dask.config.set({"distributed.scheduler.allowed-failures": 0})
    with once, distributed.client("local:1") as c:
        why = "timeout: stalled past its budget of 600 s"
        [row] = campaign_dask.DaskEngine(camp, db, c, task=failing(why)).run(new=True).rows
        assert (row.status, row.failures, row.last_error) == ("quarantined", 2, why)
        [row] = campaign_dask.DaskEngine(camp, db, c, task=failing(None)).run(new=True).rows
    assert (row.status, row.failures, row.interruptions) == ("quarantined", 0, 2)
    assert "died each time" in (row.last_error or "")


def test_a_worker_without_the_image_stops_the_campaign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRASHLAB_CACHE", str(tmp_path / "empty"))
    camp = config_campaign.load(small_campaign(tmp_path, 2))
    with distributed.client("local:1") as c:
        engine = campaign_dask.DaskEngine(camp, tmp_path / "lab.sqlite", c, task=stand_in())
        with pytest.raises(HarnessError, match="lack the guest image") as e:
            engine.run()
    assert socket.gethostname() in (e.value.detail or "") and "scenario image build" in (
        e.value.detail or ""
    )
    with Store.open(tmp_path / "lab.sqlite", create=False) as st:  # nothing was started
        assert st.execute("SELECT DISTINCT status FROM campaign_elements") == [("pending",)]


@pytest.mark.parametrize("command", ["campaign", "run"])
def test_an_address_where_no_scheduler_answers_exits_2_naming_it(
    tmp_path: Path, command: str
) -> None:
    """Bad input, said before anything is recorded, with how to start a scheduler."""
    f = small_campaign(tmp_path, 1)
    with not_a_scheduler(b"HTTP/1.1 404 Not Found\r\n\r\n") as address:
        what = (
            ["campaign", "run", f]
            if command == "campaign"
            else ["run", "ext2-fsync", "--set", "check.guest=false"]
        )
        r = subprocess.run(
            [BIN / "scenario", *what, "--dask", address, "--db", tmp_path / "lab.sqlite"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert address in out and "dask scheduler --host" in out and "Traceback" not in out
    assert not (tmp_path / "lab.sqlite").exists()


# --- with real guests -----------------------------------------------------------------------


@pytest.mark.vm
def test_a_campaign_on_two_workers_with_one_killed(
    guest_image: object,
    tmp_path: Path,
    scheduler: str,  # noqa: F811
    workers: list[subprocess.Popen[bytes]],
) -> None:
    """`scenario campaign run FILE --dask tcp://...` as a user types it; a worker (with its
    guest) is SIGKILLed while both elements run; its element runs again on the other."""
    workers += [worker(scheduler), worker(scheduler)]
    f = small_campaign(tmp_path, 2, "workload.ops=20", "workload.files=4")
    db = tmp_path / "lab.sqlite"
    argv = [BIN / "scenario", "campaign", "run", f, "--dask", scheduler, "--db", db]
    env = {**os.environ, "CRASHLAB_RESULTS": str(tmp_path)}
    camp = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )

    def kill_when_both_run() -> None:
        """SIGKILL worker 0 5 s after the second element began (an element takes ~15 s
        here: both guests are booting or running)."""
        scratch, started = paths.cache_dir() / "dask", time.time()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and camp.poll() is None:
            jobs = scratch.glob("*/*/job.json") if scratch.exists() else []  # one per attempt
            begun = sorted(t for p in jobs if (t := p.stat().st_mtime) > started)
            if len(begun) >= 2 and begun[1] < time.time() - 5:
                os.killpg(workers[0].pid, signal.SIGKILL)
                return
            time.sleep(0.5)

    killer = threading.Thread(target=kill_when_both_run)
    killer.start()
    out, _ = camp.communicate(timeout=900)
    killer.join()
    assert camp.returncode in (0, 1), out[-3000:]  # 1: ext2 without a journal may need fsck
    assert workers[0].poll() == -signal.SIGKILL, "the worker was not killed mid-campaign"
    assert "2/2 done" in out
    with Store.open(db, create=False) as st:
        [(runs, done, states)] = st.execute(
            "SELECT count(*), sum(status = 'done'), (SELECT count(*) FROM verdicts) FROM runs"
        )
    assert runs == done == 2 and states == 8 and duplicates(db) == 0
    assert sorted(p.name for p in tmp_path.glob("runs/*.log")) != []
