"""The soak (issue 48 item 4), CI-sized: campaigns/soak-ci.toml seven nights back to back
as the nightly service runs it (campaign run, digest, prune), with every fault but the
clock at a seeded moment -- kill -9 of the harness, the cache's filesystem filled, a
Dask worker killed while it runs a guest, a kernel no archive serves, a kept log
corrupted. (The clock jump moves the host's clock: it runs in the long soak of the
issue's note, not in a test.) After every night: the store whole, nothing counted twice,
no verdict lost, the disk within the budget, nothing left behind."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness import paths
from harness.campaign import soakfaults
from harness.image import build as image

pytestmark = pytest.mark.vm
FAULTS = [f for f in soakfaults.FAULTS if f != "clock"]


@pytest.fixture(autouse=True)
def _image() -> None:
    if image.cached() is None:
        pytest.skip("guest image not built")
    if os.geteuid() != 0:
        pytest.skip("the soak mounts a tmpfs for its cache (root)")


def test_seven_nights_with_faults_lose_and_leave_nothing(tmp_path: Path) -> None:
    out = tmp_path / "nights.json"
    argv = [
        sys.executable, "-m", "harness", "lab", "soak", "campaigns/soak-ci.toml",
        "--nights", "7", "--faults", ",".join(FAULTS), "--extra", "0", "--budget", "2G",
        "--cache-size", "3G", "--db", str(tmp_path / "lab.sqlite"), "--json", str(out),
    ]  # fmt: skip
    env = {**os.environ, "CRASHLAB_RESULTS": str(tmp_path / "results")}
    p = subprocess.run(argv, cwd=paths.REPO, env=env, capture_output=True, text=True, timeout=3000)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    nights = json.loads(out.read_text())
    assert len(nights) == 7 and nights[0]["faults"] == []
    assert sorted(f for n in nights for f in n["faults"]) == sorted(FAULTS)  # each once
    done = " ".join(d for n in nights for d in n["did"])
    for what in ("kill -9 of the harness", "filled", "Dask worker", "999", "corrupted"):
        assert what in done, done
    killed = [n for n in nights if "kill" in n["faults"]]
    assert all(n["starts"] >= 2 for n in killed)  # started again, as the next timer would
    for n in nights:
        assert n["integrity"] == "ok" and n["twice"] == 0 and n["lost"] == 0, n
        assert n["left"] == [] and n["disk"] <= 2 << 30, n
        assert not n["elements"].get("pending") and not n["elements"].get("running"), n
    # Every night's verdicts are there the morning after, and each night added its own.
    assert nights[-1]["verdicts"] > nights[0]["verdicts"] > 0
    # Each finished run wrote its log beside the results, as a user's campaign does.
    with sqlite3.connect(tmp_path / "lab.sqlite") as con:
        done = [r for (r,) in con.execute("SELECT id FROM runs WHERE status = 'done'")]
    assert len(done) >= 7
    assert all((tmp_path / "results" / "runs" / f"{r}.log").is_file() for r in done)
