"""Host checks on Dask give exactly what one core gives: on a LocalCluster, and on a real
`dask scheduler` with two `dask worker` processes, one of them killed mid-run (its tasks
run again elsewhere; no state is lost or yielded twice)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_parallel import _ext4_log

from harness import proc
from harness.check import distributed, parallel
from harness.config import scenario
from harness.errors import InputError
from harness.record import logwrites
from harness.replay import crashstates

BIN = Path(sys.executable).parent


def states_of(log: Path) -> list[crashstates.CrashState]:
    with logwrites.open_log(log) as lg:
        return crashstates.generate(lg, [{"kind": "fua"}, {"kind": "every", "n": 3}])


def test_bad_targets_are_input_errors() -> None:
    for bad in ("local:0", "local:x", "tcp://nohost", "8786"):
        with pytest.raises(InputError, match="not a Dask cluster"):
            distributed.parse_target(bad)
    with pytest.raises(InputError, match=r"check\.dask.*guest checks stay") as e:
        scenario.load("ext2-fsync", ("check.dask=local:2",))
    assert "check.guest=false" in (e.value.hint or "")
    sc = scenario.load("ext2-fsync", ("check.dask=local:2", "check.guest=false"))
    assert "dask" not in sc.resolved()["check"]  # where checks ran is not what was checked


def test_a_local_cluster_equals_one_core(tmp_path: Path) -> None:
    log, size = _ext4_log(tmp_path)
    states = states_of(log)
    one = {
        s.id: (r.outcome, r.exit_status)
        for s, r in parallel.check_run(log, states, "ext4", size, tmp_path / "seq")
    }
    with distributed.client("local:2") as c:
        got = [(s.id, r) for s, r in distributed.host_checks(c, log, states, "ext4", size)]
        pids = c.run(os.getpid).values()
        scratch = [Path(tempfile.gettempdir()) / f"crashlab-dask-{pid}" for pid in pids]
        digest = hashlib.sha256(log.read_bytes()).hexdigest()[:16]
        assert any((d / f"{digest}.log").exists() for d in scratch)  # the tasks' copies
    # The workers' scratch directories went with the cluster, not left for `lab clean`.
    assert not [d for d in scratch if d.exists()]
    assert len(got) == len(states) == len({sid for sid, _ in got})
    assert {sid: (r.outcome, r.exit_status) for sid, r in got} == one
    assert len({o for o, _ in one.values()}) > 1  # the states really differ


def scheduler_address(sfile: Path, deadline: float) -> str:
    """The address in the scheduler's file, once it is whole: the scheduler creates the
    file before it writes it, and a read in between found it empty (a CI error)."""
    while True:
        try:
            return str(json.loads(sfile.read_text())["address"])
        except (OSError, ValueError, KeyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[str]:
    """A real `dask scheduler` on loopback; its address."""
    sfile = tmp_path / "scheduler.json"
    p = subprocess.Popen(
        [BIN / "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
         "--no-dashboard", "--scheduler-file", sfile],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield scheduler_address(sfile, time.monotonic() + 60)
    finally:
        p.terminate()
        p.wait(timeout=30)


def worker(address: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [BIN / "dask", "worker", address, "--nworkers", "1", "--nthreads", "1",
         "--no-dashboard", "--host", "127.0.0.1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def test_a_worker_killed_mid_run_loses_nothing(tmp_path: Path, scheduler: str) -> None:
    log, size = _ext4_log(tmp_path)
    states = states_of(log)
    workers = [worker(scheduler), worker(scheduler)]
    try:
        with distributed.client(scheduler) as c:
            c.wait_for_workers(2, timeout=60)
            got, at_kill = [], 0
            for s, r in distributed.host_checks(c, log, states, "ext4", size):
                got.append((s.id, r.outcome))
                if not at_kill:  # one task done: kill a worker while the rest run
                    os.killpg(workers[0].pid, signal.SIGKILL)
                    at_kill = len(got)
        assert workers[0].wait(timeout=30) == -signal.SIGKILL and len(got) > at_kill
        assert len(got) == len(states) == len({sid for sid, _ in got})
        one = {
            s.id: r.outcome
            for s, r in parallel.check_run(log, states, "ext4", size, tmp_path / "seq")
        }
        assert dict(got) == one
    finally:
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
            w.wait(timeout=30)


@contextlib.contextmanager
def not_a_scheduler(reply: bytes | None) -> Iterator[str]:
    """A TCP port that accepts and then says nothing (``None``) or ``reply`` (another
    service; this host's egress proxy answers every address with HTTP)."""
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        held = []
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = srv.accept()
                held.append(conn)
                if reply is not None:
                    conn.sendall(reply)
        for conn in held:
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"tcp://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join()
        srv.close()


@pytest.mark.parametrize("reply", [None, b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"])
def test_an_address_where_no_scheduler_answers_is_bad_input(reply: bytes | None) -> None:
    with not_a_scheduler(reply) as address:
        t0 = time.monotonic()
        with pytest.raises(InputError, match="no Dask scheduler answers there") as e:  # noqa: SIM117
            with distributed.client(address):
                pass
    assert time.monotonic() - t0 < 15  # the connect timeout, not distributed's 30 s
    assert "dask scheduler --host 127.0.0.1" in (e.value.hint or "")
    assert f"dask worker {address}" in (e.value.hint or "")
    with pytest.raises(InputError, match="no Dask scheduler answers there"):
        distributed.client("tcp://127.0.0.1:9").__enter__()  # refused


@pytest.mark.vm
def test_scenario_run_with_dask(guest_image: object, tmp_path: Path) -> None:
    """`scenario run NAME --set check.guest=false --dask local:2`, as a user types it."""
    db = tmp_path / "lab.sqlite"
    sets = ["workload.ops=30", "crash.max_states=8", "check.guest=false"]
    argv = [BIN / "scenario", "run", "ext4-ordered-fsync", "--dask", "local:2", "--db", db]
    for s in sets:
        argv += ["--set", s]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    from harness.store.db import Store

    with Store.open(db, create=False) as st:
        [(n,)] = st.execute("SELECT count(*) FROM verdicts")
        [(checks,)] = st.execute("SELECT count(*) FROM checks WHERE stage = 'host'")
    assert n == 8 and checks == 8
    # distributed's INFO chatter (scheduler start, worker registration) is not the user's
    assert "distributed." not in r.stdout + r.stderr


def test_local_workers_ignore_ctrl_c_and_the_caller_keeps_its_handlers() -> None:
    """Ctrl-C reaches every process of the terminal's group: the harness stops its local
    workers itself, so they ignore it (each printed a KeyboardInterrupt traceback)."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with distributed.client("local:1") as c:
        assert set(c.run(signal.getsignal, signal.SIGINT).values()) == {signal.SIG_IGN}
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_sigterm_while_the_cluster_starts_waits_for_it() -> None:
    with pytest.raises(KeyboardInterrupt), proc.quiet_start():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # a SIGTERM now is held, not acted on
        started = True
    assert started


def test_workers_forked_in_a_quiet_start_ignore_ctrl_c() -> None:
    """A Ctrl-C signals the whole process group: a host-check worker forked at that
    moment printed "Exception ignored" tracebacks from its fork hooks (bench/chaos.py).
    Forked inside quiet_start (as parallel.host_checks does), a worker ignores SIGINT
    from its first instruction; the parent gets its handler back."""
    import multiprocessing as mp

    before = signal.getsignal(signal.SIGINT)
    with proc.quiet_start():
        p = mp.get_context("fork").Process(target=time.sleep, args=(5,), daemon=True)
        p.start()
    try:
        status = Path(f"/proc/{p.pid}/status").read_text()
        line = next(ln for ln in status.splitlines() if ln.startswith("SigIgn:"))
        ignored = int(line.split()[1], 16)
        assert ignored & (1 << (signal.SIGINT - 1))
        assert signal.getsignal(signal.SIGINT) is before
    finally:
        p.kill()
        p.join()
