"""Campaigns and host checks on Dask across hosts (tests/netlab.py): a scheduler and two
workers each in its own network namespace, with its own address, hostname and lab cache.
One worker's link is cut mid-campaign: its element runs again on the other, nothing lost,
nothing twice, and the campaign's exit status still counts every finding.

The elements are real and cheap: check-log scenarios of the ext4 log recorded by a real
run (tests/data/logs), host checks only, so no guest boots. One crashes during mkfs
(states from entry 0): fsck finds those states unrepairable, the campaign's findings.
The same across hosts with real guests is ``test_a_ci_campaign_across_hosts`` (vm).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import netlab
import pytest
from test_campaign_dask import duplicates, fake_cache
from test_dask import BIN, states_of
from test_parallel import _ext4_log

from harness import outcome, paths
from harness.campaign import on_dask as campaign_dask
from harness.check import distributed, parallel
from harness.store.db import Store

pytestmark = pytest.mark.skipif((why := netlab.available()) is not None, reason=f"no netlab: {why}")

LOG = paths.REPO / "tests" / "data" / "logs" / "ext4-ops-small.log.gz"
CLEAN = """description = "netlab: the recorded ext4 log's states after mkfs, host checks"
kind = "check-log"
log = "log.raw"
[fs]
type = "ext4"
disk_size = "32M"
[check]
guest = false
[crash]
states = [{ kind = "fua" }, { kind = "every", n = 1 }]
max_states = 400
"""
# A crash during mkfs: states from the log's first entry, some before the superblock.
MKFS = CLEAN.replace('log = "log.raw"', 'log = "log.raw"\nafter_entry = 0').replace(
    '"every", n = 1', '"every", n = 2'
)
REPETITIONS = 3


def campaign_files(d: Path) -> Path:
    """The log, its two scenarios, and a campaign of both x ``REPETITIONS`` seeds."""
    d.mkdir(parents=True, exist_ok=True)
    with gzip.open(LOG, "rb") as src, (d / "log.raw").open("wb") as dst:
        shutil.copyfileobj(src, dst)
    (d / "clean.toml").write_text(CLEAN)
    (d / "mkfs.toml").write_text(MKFS)
    runs = "".join(
        f'[[run]]\nscenario = "{d / name}"\nrepetitions = {REPETITIONS}\n\n'
        for name in ("clean.toml", "mkfs.toml")
    )
    f = d / "campaign.toml"
    f.write_text(f'description = "netlab: host-only check-log elements"\n\n{runs}')
    return f


def source_cache(tmp_path: Path) -> tuple[Path, str]:
    """The cache the workers' are filled from: this host's, when it has the image the
    campaign asks for; else a stand-in (these elements boot nothing)."""
    image = campaign_dask.image_hash()
    if (paths.images_dir() / image / "manifest.json").exists():
        return paths.cache_dir(), image
    return fake_cache(tmp_path / "source-cache"), image


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[netlab.Netlab]:
    cache, image = source_cache(tmp_path)
    with netlab.netlab(tmp_path / "hosts", ship_from=cache, image_hash=image) as lab:
        yield lab


def first_job(cache: Path, deadline: float) -> str | None:
    """The element key of the first attempt a worker began (its scratch job.json)."""
    while time.monotonic() < deadline:
        for job in (cache / "dask").glob("*/*/job.json"):
            with contextlib.suppress(OSError, ValueError):
                return str(json.loads(job.read_text())["key"])
        time.sleep(0.05)
    return None


def run_campaign(
    lab: netlab.Netlab, f: Path, db: Path, cut: netlab.Host | None, timeout: float = 600
) -> tuple[subprocess.CompletedProcess[str], dict[str, float | str | None]]:
    """`scenario campaign run F --dask tcp://...` from the client's address, as a user
    types it; with ``cut``, that worker's link is cut once it has begun an element.
    The exit status, output, and when things happened (seconds from the start)."""
    argv = [BIN / "scenario", "campaign", "run", f, "--dask", lab.address, "--db", db]
    t0 = time.monotonic()
    seen: dict[str, float | str | None] = {}

    def cutter() -> None:
        assert cut is not None
        seen["cut_key"] = first_job(cut.cache, t0 + min(timeout, 300))
        lab.cut(cut)
        seen["cut_at"] = time.monotonic() - t0

    thread = threading.Thread(target=cutter, daemon=True)
    if cut is not None:
        thread.start()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=results_in(db))
    seen["wall"] = time.monotonic() - t0
    thread.join(timeout=1) if cut is not None else None
    return r, seen


def results_in(db: Path) -> dict[str, str]:
    """The environment of a CLI whose run logs go beside ``db``, not into the checkout."""
    return {**os.environ, "CRASHLAB_RESULTS": str(db.parent)}


def findings(db: Path) -> dict[str, tuple[str, int]]:
    """Per run: its host and how many of its states are findings."""
    bad = tuple(str(o) for o in outcome.FINDINGS)
    marks = ",".join("?" * len(bad))
    with Store.open(db, create=False) as st:
        rows = st.execute(
            "SELECT r.id, r.host, (SELECT count(*) FROM verdicts v WHERE v.run_id = r.id"
            f" AND v.outcome IN ({marks})) FROM runs r",
            bad,
        )
    return {str(i): (str(h), int(n)) for i, h, n in rows}


def check_one_result_each(
    lab: netlab.Netlab, db: Path, seen: dict[str, float | str | None], rc: int, elements: int
) -> dict[str, tuple[str, int]]:
    """Every element done with exactly one run, the cut one's on the other host, nothing
    twice, and the exit status the runs' stored ones make; the findings per run."""
    victim, other = lab.workers
    with Store.open(db, create=False) as st:
        rows = st.execute("SELECT key, status, run_id FROM campaign_elements")
        statuses = [int(s) for (s,) in st.execute("SELECT exit_status FROM runs")]
    assert [s for _, s, _ in rows] == ["done"] * elements
    by_run = findings(db)
    assert sorted(by_run) == sorted(str(run) for _, _, run in rows)
    assert duplicates(db) == 0
    cut_run = next(run for key, _, run in rows if key == seen["cut_key"])
    assert by_run[cut_run][0] == other.hostname
    assert {h for h, _ in by_run.values()} <= {victim.hostname, other.hostname}
    assert rc == outcome.campaign_status(statuses, quarantined=False)
    return by_run


def test_a_campaign_across_hosts_with_a_cut_link(tmp_path: Path, lab: netlab.Netlab) -> None:
    f, db = campaign_files(tmp_path / "campaign"), tmp_path / "lab.sqlite"
    r, seen = run_campaign(lab, f, db, cut=lab.workers[0])
    out = r.stdout + r.stderr
    print(f"\nacross hosts, one link cut: {seen}")
    assert seen.get("cut_key"), "the worker began no element before the campaign ended"
    # Findings (the mkfs states), so 1, whichever host found them.
    assert r.returncode == 1, out[-3000:] + lab.logs()
    assert "Traceback" not in out
    by_run = check_one_result_each(lab, db, seen, r.returncode, 2 * REPETITIONS)
    # Every finding is there: each mkfs element has what one host finds on its own.
    counts = sorted(n for _, n in by_run.values())
    assert counts == [0] * REPETITIONS + [reference_findings(tmp_path, f.parent)] * REPETITIONS
    assert counts[-1] > 0


def reference_findings(tmp_path: Path, d: Path) -> int:
    """The findings of the mkfs scenario run here, on one host, without Dask."""
    db = tmp_path / "reference.sqlite"
    r = subprocess.run(
        [BIN / "scenario", "run", d / "mkfs.toml", "--db", db],
        capture_output=True, text=True, timeout=300, env=results_in(db),
    )  # fmt: skip
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    [(_, n)] = findings(db).values()
    return n


def test_host_checks_across_hosts_with_a_cut_link(tmp_path: Path, lab: netlab.Netlab) -> None:
    """`--dask` host checks (check.guest=false): the log scattered to the workers over the
    lab's network; after the first result, the link cut of the worker that holds the log
    (Dask keeps one copy: its memory manager drops the broadcast's others within 2 s), so
    the cluster loses it: every state still once, each with the outcome one core gives."""
    log, size = _ext4_log(tmp_path)
    states = states_of(log)
    got: list[tuple[str, str]] = []
    holders: tuple[str, ...] = ()
    t0 = time.monotonic()
    with distributed.client(lab.address) as c:
        for s, r in distributed.host_checks(c, log, states, "ext4", size):
            got.append((s.id, r.outcome))
            if len(got) == 1:
                holders = log_holders(c)
                victim = next(h for h in lab.workers if f"//{h.address}:" in holders[0])
                lab.cut(victim)
    print(f"\nhost checks across hosts, the log's holder cut: {time.monotonic() - t0:.1f} s")
    if len(holders) == 1:
        assert "lose scattered data" in lab.scheduler.log()
    assert len(got) == len(states) == len({sid for sid, _ in got})
    one = {
        s.id: r.outcome for s, r in parallel.check_run(log, states, "ext4", size, tmp_path / "seq")
    }
    assert dict(got) == one


def log_holders(c: Any, wait: float = 5.0) -> tuple[str, ...]:
    """The workers that hold the scattered log, once they are one (or after ``wait``)."""
    deadline = time.monotonic() + wait
    while True:
        held = [w for k, w in c.who_has().items() if str(k).startswith("bytes-")]
        if held and (len(held[0]) == 1 or time.monotonic() > deadline):
            return tuple(held[0])
        time.sleep(0.2)


@pytest.mark.parametrize("where", ["in-subnet", "no-route"])
def test_an_address_that_does_not_answer_exits_2(
    tmp_path: Path, lab: netlab.Netlab, where: str
) -> None:
    """On the lab's network, an address nobody holds (the connect times out or the host is
    unreachable); from a host without a route, the issue's tcp://10.255.255.1:8786
    (this machine's own route leads to a proxy that answers anything: test_dask)."""
    f, db = campaign_files(tmp_path / "campaign"), tmp_path / "lab.sqlite"
    address = f"tcp://{lab.subnet}.250:8786" if where == "in-subnet" else "tcp://10.255.255.1:8786"
    argv: list[str | Path] = [BIN / "scenario", "campaign", "run", f, "--dask", address]
    if where == "no-route":
        argv = ["ip", "netns", "exec", lab.scheduler.ns, *argv]
    t0 = time.monotonic()
    r = subprocess.run(
        [*argv, "--db", db], capture_output=True, text=True, timeout=120, env=results_in(db)
    )
    took = time.monotonic() - t0
    out = r.stdout + r.stderr
    print(f"\n{address} ({where}): exit {r.returncode} in {took:.1f} s")
    assert r.returncode == 2, out
    assert f"--dask {address}: no Dask scheduler answers there" in out and "Traceback" not in out
    assert "dask scheduler --host" in out and f"dask worker {address}" in out
    assert not db.exists()
    assert took < 20


@pytest.mark.vm
def test_a_ci_campaign_across_hosts(guest_image: object, tmp_path: Path) -> None:
    """campaigns/ci-hosts.toml (two ext4 elements, each a real recording guest) across the
    two worker namespaces, each booting from the image shipped into its own cache; one
    worker's link cut as it begins its element: that element runs again on the other
    host."""
    f, db = paths.REPO / "campaigns" / "ci-hosts.toml", tmp_path / "lab.sqlite"
    with netlab.netlab(
        tmp_path / "hosts", ship_from=paths.cache_dir(), image_hash=campaign_dask.image_hash()
    ) as lab:
        r, seen = run_campaign(lab, f, db, cut=lab.workers[0], timeout=3600)
        logs = lab.logs()
        print(f"\nci-hosts.toml across hosts, one link cut: {seen}")
        out = r.stdout + r.stderr
        assert seen.get("cut_key") and "Traceback" not in out, out[-3000:] + logs
        assert r.returncode in (0, 1), out[-3000:] + logs
        check_one_result_each(lab, db, seen, r.returncode, 2)
