"""``scenario results serve``: datasette on 127.0.0.1 over a read-only snapshot.

The server tests start the real command on a free port against a store with rows of
every kind, written through the Store API, fetch pages with urllib and stop it with
SIGTERM. The browser tests load the dashboard and a query page in headless Chromium
(Debian's ``chromium``, which scripts/install-host-deps installs): without it they fail,
never skip, so CI always looks at the page.
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
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.errors import InputError
from harness.outcome import COLOURS, Outcome
from harness.report import dashboard, query, serve, serve_meta
from harness.store.db import (
    Accelerator,
    CheckResult,
    CrashState,
    LogInfo,
    Phase,
    RunEnv,
    RunKind,
    RunStatus,
    Stage,
    Store,
)
from tests.synth import add_every_kind

REPO = Path(__file__).resolve().parent.parent
LOG = LogInfo("feed", "/tmp/w.log", 10, 1, 3, 1, 0, 4096)
OUTCOMES = [Outcome.CONSISTENT] * 5 + [Outcome.DATA_LOSS, Outcome.REPAIRED]
# the kernel's lines the guest check keeps (harness/report/journal.py reads them)
JOURNAL = (
    "kernel: EXT4-fs (vdb): recovery complete",
    "kernel: JBD2: Invalid checksum recovering block 42 in log",
    "kernel: EXT4-fs (vdb): mounted filesystem",
)


def fill(store: Store) -> tuple[str, str]:
    """A crash run with findings, recovery times and the guest's journal messages, and a
    run of every other kind (tests/synth.py); returns the crash and the ZFS run."""
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
        checks = [
            CheckResult(Stage.HOST, "e2fsck", o, 0.4, 0 if o == "consistent" else 1),
            CheckResult(Stage.GUEST, "mount", o, 0.3, 0, JOURNAL[i % len(JOURNAL)]),
        ]
        times = {Phase.JOURNAL_REPLAY: 0.1 * i, Phase.FSCK: 0.5 + 0.1 * i, Phase.MOUNT: 0.2}
        store.record_state_result(run, state, checks, times)
    store.finish_run(run, RunStatus.DONE)
    zfs = add_every_kind(store)["zfs"]
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
    # the last line names the server; datasette answered before the first is printed
    for _ in range(4):
        line = proc.stdout.readline()
        if not line:
            proc.wait(timeout=30)
            raise AssertionError("serve exited: " + "".join(lines) + (proc.stderr or "").read())
        lines.append(line)
    base = lines[3].split()[0]
    assert lines[1].split()[0] == base + serve_meta.DASHBOARD.lstrip("/")
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


def crash_run(db: Path) -> str:
    """``fill``'s crash run (the campaigns' runs have two states each)."""
    with Store.open(db) as store:
        rows = store.execute(
            "SELECT run_id FROM verdicts GROUP BY run_id HAVING count(*) = ?", (len(OUTCOMES),)
        )
    (run,) = rows
    return str(run[0])


def test_pages_tables_queries_and_json(db: Path, served: Served) -> None:
    run_id = crash_run(db)
    index = served.get("")
    assert "crashlab results" in index and "Read-only snapshot" in index
    assert f'href="{serve_meta.DASHBOARD}"' in index
    page = served.get("lab")
    for title, *_ in serve_meta.CANNED_QUERIES.values():
        assert title in page
    assert 'href="/lab/v_runs"' in page and "/lab/table_patterns" in page
    # a view, with its column descriptions and the run in it
    runs = served.get("lab/v_runs")
    assert "column-descriptions" in runs and "wall time of the whole run, seconds" in runs
    assert run_id in runs and "ext4-ordered-fsync" in runs
    # the stylesheet the metadata names is served
    assert "grid-template-columns" in served.get("crashlab/serve.css")
    # a canned query as HTML and as JSON, with the values the store holds
    html = served.get("lab/table_recovery")
    assert "recovery: seconds per phase by fs, data_mode" in html and "journal_replay" in html
    findings = served.json(f"lab/findings.json?run={run_id[:6]}&_shape=array")
    assert sorted(r["outcome"] for r in findings) == ["data_loss", "repaired"]
    assert served.json("lab/findings.json?run=nosuchrun&_shape=array") == []
    assert len(served.json("lab/findings.json?run=&_shape=array")) > len(findings)
    per_run = served.json("lab/findings_per_run.json?_shape=array")
    crash = next(r for r in per_run if r["run_id"] == run_id)
    assert (crash["states"], crash["findings"]) == (len(OUTCOMES), 2)
    resilver = served.json("lab/table_resilver.json?_shape=array")
    assert [(r["layout"], r["fill"], r["mean"]) for r in resilver if r["metric"] == "seconds"] == [
        ("mirror", 0.25, 2.5),
        ("mirror", 0.5, 5.0),
        ("mirror", 0.75, 7.5),
        ("raidz1", 0.25, 5.0),
        ("raidz1", 0.5, 10.0),
        ("raidz1", 0.75, 15.0),
    ]
    nights = served.json("lab/findings_per_campaign.json?_shape=array")
    assert [(n["campaign"], n["elements"], n["findings"]) for n in nights] == [
        ("nightly", 2, 0),
        ("nightly", 2, 2),
    ]
    (bugs,) = served.json("lab/bug_clusters.json?run=&_shape=array")
    assert (bugs["rule"], bugs["workloads"], bugs["states"]) == ("file-missing", 1, 1)
    assert bugs["smallest_ops"] == "creat(A) fsync(A)"


def test_zfs_tables_group_by_the_stored_cell(db: Path) -> None:
    """``results table resilver --by recordsize`` (a field of the scan's cell) runs: the
    kind's cell fields once named a column of no table in their subquery."""
    with Store.open(db) as store:
        t = query.grouped(store, "resilver", ["layout", "recordsize"])
    assert [g.key for g in t.groups] == [("mirror", None), ("raidz1", None)]


def test_kind_queries_match_results_table(db: Path) -> None:
    """Each kind's canned queries give what ``results table KIND`` computes in Python:
    the same groups, n, mean, min, max and outcome counts."""
    with Store.open(db) as store:
        kinds = sorted(query.table_kinds())
        assert {"faults", "io", "journal", "patterns", "recovery", "workloads"} <= set(kinds)
        assert {"resilver", "scrub"} <= set(kinds)
        for name in kinds:
            sql = query.kind_sql(store, name)
            table = query.grouped(store, name, list(sql.by))
            assert table.groups, f"fill() left kind {name} empty"
            want = {
                (*g.key, split): (s.n, s.mean, s.min, s.max)
                for g in table.groups
                for split, s in g.stats.items()
            }
            got = {}
            for r in store.execute(sql.stats):
                key = r[:-4] if table.kind.split else (*r[:-4], table.kind.value)
                got[tuple(key)] = r[-4:]
            assert set(got) == set(want), name
            for key, (n, mean, lo, hi) in want.items():
                assert got[key] == (n, *(pytest.approx(v, abs=1e-3) for v in (mean, lo, hi)))
            if sql.counts is not None:
                counts = {(*g.key, o): c for g in table.groups for o, c in g.counts.items()}
                assert {tuple(r[:-1]): r[-1] for r in store.execute(sql.counts)} == counts, name


def test_read_only_snapshot_removed_on_stop(db: Path, served: Served) -> None:
    with Store.open(db) as store:
        runs = len(store.runs())
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
        assert len(store.runs()) == runs


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
        meta = serve_meta.metadata("lab", db, "now", store)
    queries = {n: q["sql"] for n, q in meta["databases"]["lab"]["queries"].items()}
    charts = meta["plugins"]["datasette-dashboards"][dashboard.SLUG]["charts"]
    queries |= {f"chart {n}": c["query"] for n, c in charts.items() if "query" in c}
    assert len(charts) == len(dashboard.layout()) * 2 - 1  # "about" spans a row
    conn = sqlite3.connect(db)
    try:
        for name, sql in queries.items():
            args = {"run": ""} if ":run" in sql else {}
            assert conn.execute(sql, args).fetchall(), f"{name}: no rows from fill()"
    finally:
        conn.close()


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


# --- in a real browser ------------------------------------------------------------------


def chromium(profile: Path, *args: str) -> str:
    """Headless Chromium on ``args``; its stdout. Every host but 127.0.0.1 fails to
    resolve, so a page that needed the internet (a CDN's script) would draw nothing."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail(
            "chromium is not installed: the dashboard is checked in a real browser."
            " scripts/install-host-deps installs Debian's package;"
            " by hand: apt-get install chromium"
        )
    argv = [
        exe,
        "--headless",
        "--no-sandbox",  # as root, Chromium's sandbox refuses to start
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        f"--user-data-dir={profile}",
        # virtual time runs the page's scripts (the fetches, Vega's drawing) before the dump
        "--virtual-time-budget=20000",
        *args,
    ]
    r = subprocess.run(
        argv, capture_output=True, text=True, timeout=180, env={**os.environ, "HOME": str(profile)}
    )
    assert r.returncode == 0, f"$ {' '.join(argv)}\n{r.stderr[-3000:]}"
    return r.stdout


def chart_parts(dom: str) -> dict[str, str]:
    """Each chart's markup in a dumped dashboard: from its ``chart-SLUG`` box to the next
    card (the cards follow one another in the grid)."""
    out = {}
    for part in dom.split('<div id="chart-')[1:]:
        slug, _, rest = part.partition('"')
        out[slug] = rest.split('id="card-')[0]
    return out


def colour_pixels(png: Path, hex_colour: str) -> int:
    import matplotlib.image

    rgb = matplotlib.image.imread(png)[..., :3]
    want = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    return int((abs(rgb - want).max(axis=-1) < 0.02).sum())


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Served]]:
    d = tmp_path_factory.mktemp("serve")
    db = d / "lab.sqlite"
    with Store.open(db) as store:
        fill(store)
    s = start(db)
    try:
        yield db, s
    finally:
        stop(s)


def test_dashboard_draws_every_chart_in_chromium(lab: tuple[Path, Served], tmp_path: Path) -> None:
    db, served = lab
    url = served.base + serve_meta.DASHBOARD.lstrip("/")
    shots = screenshot_dir(tmp_path)
    dom = chromium(tmp_path / "profile", "--dump-dom", url)
    parts = chart_parts(dom)
    with Store.open(db) as store:
        meta = serve_meta.metadata("lab", db, "now", store)
        charts = meta["plugins"]["datasette-dashboards"][dashboard.SLUG]["charts"]
        rows = {n: store.execute(c["query"]) for n, c in charts.items() if "query" in c}
    assert set(parts) == set(charts)
    assert "Read-only snapshot of" in parts["about"]
    for slug, data in rows.items():
        # drawn: an SVG with a mark (bar, point) per row of the chart's query, not a script
        marks = parts[slug].count('role="graphics-symbol"')
        assert "<svg" in parts[slug] and marks >= len(data) > 0, (slug, marks, len(data))
    png = shots / "dashboard.png"
    chromium(tmp_path / "profile", f"--screenshot={png}", "--window-size=1400,2000", url)
    # the verdict chart's colours: consistent (green) and data_loss (red) bars are drawn
    assert colour_pixels(png, COLOURS[Outcome.CONSISTENT]) > 500
    assert colour_pixels(png, COLOURS[Outcome.DATA_LOSS]) > 50


def test_query_pages_show_their_tables_in_chromium(
    lab: tuple[Path, Served], tmp_path: Path
) -> None:
    db, served = lab
    shots = screenshot_dir(tmp_path)
    # the database page lists every canned query, the kinds' too
    dom = chromium(tmp_path / "profile", "--dump-dom", served.base + "lab")
    with Store.open(db) as store:
        queries = serve_meta.metadata("lab", db, "now", store)["databases"]["lab"]["queries"]
    assert {"table_io", "table_faults_outcomes", "bug_clusters"} <= set(queries)
    for name in queries:
        assert f'href="/lab/{name}"' in dom, name
    png = shots / "lab.png"
    chromium(
        tmp_path / "profile", f"--screenshot={png}", "--window-size=1280,2400", served.base + "lab"
    )
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 10_000
    # a kind's query page: its rows in the table
    url = served.base + "lab/table_patterns_outcomes"
    dom = chromium(tmp_path / "profile", "--dump-dom", url)
    with Store.open(db) as store:
        sql = query.kind_sql(store, "patterns").counts
        assert sql is not None
        want = store.execute(sql)
    table = dom.split('class="rows-and-columns"')[1].split("</table>")[0]
    assert table.count("<tr") == len(want) + 1  # the header, then a row per group and class
    assert "noauto_da_alloc" in table and ">empty<" in table
    png = shots / "table_patterns_outcomes.png"
    chromium(tmp_path / "profile", f"--screenshot={png}", "--window-size=1280,900", url)
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 10_000


def screenshot_dir(tmp_path: Path) -> Path:
    """Where the screenshots go: $CRASHLAB_SCREENSHOTS when set (to keep and look at),
    else the test's temporary directory."""
    where = Path(os.environ.get("CRASHLAB_SCREENSHOTS") or tmp_path / "shots")
    where.mkdir(parents=True, exist_ok=True)
    return where
