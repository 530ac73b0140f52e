"""fsstress-482-ci in a real guest: fstests' fsstress recorded under dm-log-writes with
generic/482's arguments, FUA states after the mkfs mark judged by fsck and mount, and the
log left (with fstests' own ``mkfs`` mark) where check-log finds generic/482's start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.config import scenario
from harness.experiments import lifecycle
from harness.experiments.checklog import source
from harness.image import build as image
from harness.record import fsstress, logwrites
from harness.store.db import Store

pytestmark = pytest.mark.vm


def test_fsstress_482_ci_every_state_judged_and_its_log_left(
    guest_image: image.Image, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not fsstress.binary().is_file():
        pytest.skip(f"fsstress not built: {fsstress.BUILD_HINT}")  # fstests: _notrun
    monkeypatch.setenv("CRASHLAB_RESULTS", str(tmp_path / "results"))
    sc = scenario.load("fsstress-482-ci", ["workload.keep_log=logs/generic-482.log"])
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    assert r.status == 0 and r.items == 8 and dict(r.counts) == {"consistent": 8}, r.counts
    assert "fsstress writes no oracle" in (r.experiment.caveat() or "")
    rdir = lifecycle.run_dir(r.run_id)
    meta = json.loads((rdir / "recording.json").read_text())
    ran = meta["workload"]
    assert ran["fsstress"] == fsstress.digest(fsstress.binary())
    assert ran["argv"][1:7] == ["-w", "-d", "/mnt/test", "-n", "64", "-p"]
    with Store.open(db, create=False) as st:
        states = st.run_detail(r.run_id).states
    assert {s.generator for s in states} == {"fua"}
    kept = tmp_path / "results" / "logs" / "generic-482.log"
    with logwrites.open_log(kept) as lg, logwrites.open_log(rdir / "log.raw") as own:
        assert lg.hash == own.hash
        start = source.resolve_start(lg, "mkfs", None)
        # fstests' mark right after the lab's: generic/482 starts where the lab does
        lab = lg.find_mark("crashlab:mkfs")
        assert lab is not None and start.entry == lab + 1, dict(lg.marks)
        assert start.entry < min(s.prefix for s in states), start.says
