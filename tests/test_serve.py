"""``scenario results serve``: datasette on 127.0.0.1 over a read-only snapshot.

The server tests start the real command on a free port against a small store written
through the Store API, fetch pages with urllib and stop it with SIGTERM. The Chromium
test renders one page when ``chromium`` is installed (it is not a project dependency).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.errors import InputError
from harness.outcome import Outcome
from harness.report import serve, serve_meta
from harness.store.db import (
    Accelerator,
    CheckResult,
    CrashState,
    LogInfo,
    Phase,
    RunEnv,
    RunKind,
    RunStatus,
    ScanKind,
    Stage,
    Store,
)

pytest.importorskip("datasette", reason="datasette is an optional dependency ([serve])")

REPO = Path(__file__).resolve().parent.parent
LOG = LogInfo("feed", "/tmp/w.log", 10, 1, 3, 1, 0, 4096)
OUTCOMES = [Outcome.CONSISTENT] * 5 + [Outcome.DATA_LOSS, Outcome.REPAIRED]


def fill(store: Store) -> tuple[str, str]:
    """A crash run with findings and recovery times, and a ZFS run with resilvers."""
    run = store.begin_run(
        "ext4-ordered-fsync",
        RunKind.CRASH,
        {"fs": {"data_mode": "ordered"}, "workload": {"ops": 40}},
        1,
        fs="ext4",
        env=RunEnv(accelerator=Accelerator.TCG, guest_kernel="6.1.0-56-amd64"),
    )
    store.add_log(LOG, run_id=run)
    for i, o in enumerate(OUTCOMES):
        state = CrashState(f"fua-{i:04d}", LOG.hash, "fua", prefix=i, last_mark=f"op-{i}")
        checks = [CheckResult(Stage.HOST, "e2fsck", o, 0.4, 0 if o == "consistent" else 1)]
        times = {Phase.JOURNAL_REPLAY: 0.1 * i, Phase.FSCK: 0.5 + 0.1 * i, Phase.MOUNT: 0.2}
        store.record_state_result(run, state, checks, times)
    store.finish_run(run, RunStatus.DONE)
    zfs = store.begin_run("resilver-sweep", RunKind.ZFS, {"layout": "mirror"}, None, fs="zfs")
    for layout, factor in (("mirror", 1.0), ("raidz1", 2.0)):
        for fill_ in (0.25, 0.75):
            store.add_zfs_scan(
                zfs,
                repetition=0,
                kind=ScanKind.RESILVER,
                layout=layout,
                fill=fill_,
                seconds=10 * fill_ * factor,
            )
    store.finish_run(zfs, RunStatus.DONE)
    return run, zfs


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "lab.sqlite"
    with Store.open(path) as store:
        fill(store)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scenario(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [sys.executable, "-m", "harness", "results", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    # rich folds long messages at 80 columns when piped
    r.stderr = " ".join(r.stderr.split())
    return r


class Served:
    def __init__(self, proc: subprocess.Popen[str], base: str, lines: list[str]):
        self.proc, self.base, self.lines = proc, base, lines

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.base + path, timeout=30) as r:
            assert r.status == 200
            return str(r.read().decode())

    def json(self, path: str) -> Any:
        return json.loads(self.get(path))


def start(db: Path, port: int = 0) -> Served:
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "results", "serve", "--db", str(db), "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    # the third line names the server; datasette answered before the first is printed
    for _ in range(3):
        line = proc.stdout.readline()
        if not line:
            proc.wait(timeout=30)
            raise AssertionError("serve exited: " + "".join(lines) + (proc.stderr or "").read())
        lines.append(line)
    base = lines[2].split()[0]
    assert base.startswith("http://127.0.0.1:")
    return Served(proc, base, lines)


def stop(s: Served) -> int:
    s.proc.send_signal(signal.SIGTERM)
    status = s.proc.wait(timeout=30)
    assert s.proc.stdout is not None and s.proc.stderr is not None
    s.proc.stdout.close()
    s.proc.stderr.close()
    return status


@pytest.fixture
def served(db: Path) -> Iterator[Served]:
    s = start(db)
    try:
        yield s
    finally:
        if s.proc.poll() is None:
            stop(s)


def test_pages_tables_queries_and_json(db: Path, served: Served) -> None:
    with Store.open(db) as store:
        run_id = next(r.id for r in store.runs() if r.kind == "crash")
    index = served.get("")
    assert "crashlab results" in index and "Read-only snapshot" in index
    page = served.get("lab")
    for title, *_ in serve_meta.CANNED_QUERIES.values():
        assert title in page
    assert 'href="/lab/v_runs"' in page
    # a view, with its column descriptions and the run in it
    runs = served.get("lab/v_runs")
    assert "column-descriptions" in runs and "wall time of the whole run, seconds" in runs
    assert run_id in runs and "ext4-ordered-fsync" in runs
    # the stylesheet the metadata names is served
    assert "grid-template-columns" in served.get("crashlab/serve.css")
    # a canned query as HTML and as JSON, with the values the store holds
    html = served.get("lab/recovery_by_fs_mode")
    assert "Recovery time by filesystem and data mode" in html and "journal_replay" in html
    rows = served.json("lab/recovery_by_fs_mode.json?_shape=array")
    fsck = next(r for r in rows if r["phase"] == "fsck")
    assert (fsck["fs"], fsck["data_mode"], fsck["n"]) == ("ext4", "ordered", len(OUTCOMES))
    assert fsck["mean_s"] == pytest.approx(0.8) and fsck["max_s"] == pytest.approx(1.1)
    findings = served.json("lab/findings.json?run=&_shape=array")
    assert sorted(r["outcome"] for r in findings) == ["data_loss", "repaired"]
    assert served.json(f"lab/findings.json?run={run_id[:6]}&_shape=array") == findings
    assert served.json("lab/findings.json?run=nosuchrun&_shape=array") == []
    per_run = served.json("lab/findings_per_run.json?_shape=array")
    crash = next(r for r in per_run if r["run_id"] == run_id)
    assert (crash["states"], crash["findings"]) == (len(OUTCOMES), 2)
    resilver = served.json("lab/resilver_by_layout_fill.json?_shape=array")
    assert [(r["layout"], r["fill"], r["mean_s"]) for r in resilver] == [
        ("mirror", 0.25, 2.5),
        ("mirror", 0.75, 7.5),
        ("raidz1", 0.25, 5.0),
        ("raidz1", 0.75, 15.0),
    ]


def test_read_only_snapshot_removed_on_stop(db: Path, served: Served) -> None:
    (info,) = served.json("-/databases.json")
    assert info["is_mutable"] is False
    snapshot = Path(info["path"])
    assert snapshot.is_file() and snapshot != db
    # datasette refuses anything but SELECT; the snapshot could not be written anyway
    with pytest.raises(urllib.error.HTTPError) as e:
        served.get("lab.json?sql=DELETE+FROM+runs")
    assert e.value.code == 400
    assert stop(served) == 0
    assert not snapshot.exists() and not snapshot.parent.exists()
    with Store.open(db) as store:
        assert len(store.runs()) == 2


def test_snapshot_includes_the_wal(tmp_path: Path) -> None:
    """Rows still in the live file's WAL (a campaign writing now) are in the snapshot."""
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as store:
        fill(store)
        # this connection stays open: no checkpoint, the rows live in the -wal file
        wal = store.begin_run("xfs-fsync", RunKind.CRASH, {}, 7, fs="xfs")
        assert Path(f"{db}-wal").stat().st_size > 0
        s = start(db)
        try:
            ids = [r["run_id"] for r in s.json("lab/v_runs.json?_shape=array")]
            assert wal in ids
            # ... and it is a snapshot: what is written after the start is not shown
            later = store.begin_run("xfs-fsync", RunKind.CRASH, {}, 8, fs="xfs")
            ids = [r["run_id"] for r in s.json("lab/v_runs.json?_shape=array")]
            assert later not in ids
        finally:
            stop(s)


def test_every_described_column_exists_and_every_query_runs(db: Path) -> None:
    with Store.open(db) as store:
        for table, (_, columns) in serve_meta.TABLES.items():
            have = {str(r[1]) for r in store.execute(f"PRAGMA table_info({table})")}
            assert have, f"no table or view {table}"
            assert set(columns) <= have, f"{table}: {set(columns) - have}"
        for name, (_, _, sql) in serve_meta.CANNED_QUERIES.items():
            args = {"run": ""} if ":run" in sql else {}
            conn = sqlite3.connect(db)
            try:
                rows = conn.execute(sql, args).fetchall()
            finally:
                conn.close()
            assert rows or name == "campaign_elements", name


def test_bad_input_exits_2_without_traceback(db: Path, tmp_path: Path) -> None:
    for args, needle in (
        (["--db", str(tmp_path / "none.sqlite")], "no results database"),
        (["--db", str(db), "--port", "http"], "not a port number"),
        (["--db", str(db), "--port", "70000"], "must be 1 to 65535"),
    ):
        r = scenario("serve", *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    foreign = tmp_path / "foreign.sqlite"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    r = scenario("serve", "--db", str(foreign), "--port", "0")
    assert r.returncode == 2 and "not a crashlab results file" in r.stderr, r.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = scenario("serve", "--db", str(db), "--port", str(port))
    assert r.returncode == 2 and "is in use" in r.stderr and "Traceback" not in r.stderr


def test_check_port() -> None:
    assert serve.check_port(0) > 0
    with pytest.raises(InputError):
        serve.check_port(-1)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_renders_in_headless_chromium(served: Served, tmp_path: Path) -> None:
    png = tmp_path / "serve.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                f"--screenshot={png}",
                "--window-size=1280,900",
                served.base + "lab/v_runs",
            ],
            capture_output=True,
            timeout=120,
            check=True,
            env={**os.environ, "HOME": profile},
        )
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 10_000
