"""``scenario triage`` of a search run's crash state, on the host: a host-only search run
whose one workload's recording is the recorded fixture (tests/data/search/README.md),
laid into the run's folder where the search's recorder keeps it. A reorder state is made
a finding by the stand-in checker that fails exactly when one chosen write is lost (as
in test_triage.py), so ddmin's answer is known; the rest is the real search run, the
real loading from the workload's folder, replayer, host checker and report."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from harness.check.host import CheckResult
from harness.cli.main import main
from harness.config import scenario
from harness.config.crash import FsSpec
from harness.crashstate import checking as states
from harness.crashstate import statelog
from harness.crashstate import workloads as record
from harness.crashstate.onelog import commit_state
from harness.crashstate.stored import stored_state
from harness.experiments import lifecycle
from harness.model import ace
from harness.model.oracle.doc import OracleDoc
from harness.outcome import Outcome
from harness.store.db import CrashState as StoredState
from harness.store.db import LogInfo, RunKind, Store
from harness.triage import judge, minimal, opmin, report, target, workload
from tests.synth import lost, minimised_twice, without_image

FIXTURE = Path(__file__).parent / "data" / "search" / "ext4-ace-noop"
FACTS = json.loads((FIXTURE / "recording.json").read_text())
WID = FACTS["id"]
# The search the fixture was recorded by (its README), checked on the host only.
SETTINGS = [
    f"workload.indices=[{FACTS['index']}]",
    "workload.sample=0",
    "workload.noop_sync=true",
    "expect=findings",
    'fs.mkfs_options=["-J", "size=1"]',
    'fs.mount_options=["noinit_itable"]',
    "crash.states=[{kind='mark'}, {kind='reorder', max_states=6}]",
    "crash.max_states=20",
    "check.guest=false",
]


def lay_fixture(rdir: Path, fs: FsSpec, workloads: Any, **_: Any) -> dict[str, float]:
    """The search recorder's stand-in: the fixture's recording, kept as
    ``record_batch`` keeps one (the log, its oracle, its facts)."""
    assert [w["id"] for w in workloads] == [WID]
    d = record.folder(rdir, WID)
    d.mkdir(parents=True)
    with gzip.open(FIXTURE / "log.raw.gz", "rb") as src, (d / "log.raw").open("wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(FIXTURE / "oracle.json", d / "oracle.json")
    shutil.copy(FIXTURE / "recording.json", d / "recording.json")
    return {}


@pytest.fixture()
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    without_image(tmp_path, monkeypatch)
    monkeypatch.setattr(record, "record_batch", lay_fixture)
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(scenario.load("ace-seq1-ci", SETTINGS), db=db)
    assert r.summary["workload_status"] == {"recorded": 1}, r.summary
    return db, r.run_id


def test_a_search_state_loads_from_its_workloads_folder(
    run: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, run_id = run
    with Store.open(db, create=False) as st:
        sid = st.run_detail(run_id).states[0].id
    assert sid.startswith(f"{WID}/")
    # A finding of the stand-in's making: target.load takes findings only.
    _, state = stored_state(sid, db)
    with Store.open(db, create=False) as st:
        bad = CheckResult("host", "stand-in", Outcome.UNREPAIRABLE, 4, 0.0, "lost")
        commit_state(st, run_id, states.Checked(state, [bad]))
    t = target.load(sid, db)
    folder = lifecycle.run_dir(run_id) / "workloads" / WID
    assert t.log_path == folder / "log.raw" and t.rdir == lifecycle.run_dir(run_id)
    assert t.size == FACTS["device_size"] == 32 << 20
    assert t.oracle.raw == json.loads((FIXTURE / "oracle.json").read_text())
    assert t.oracle.ops[0].i == 0 and t.oracle.final_mark == t.oracle.ops[-1].mark
    assert t.workload["id"] == WID and t.workload["seq"] == 1
    assert t.fs == FsSpec.model_validate(t.params["fs"]) and t.fs.mkfs_options == ("-J", "size=1")
    where = statelog.of(run_id, state)
    assert where.workload == WID and where.device_size() == t.size
    # The mkfs mark, as for a crash run: the search cut its states after its base mark.
    assert 0 < t.start < t.state.prefix
    # reproduce and explain read the same folder.
    image = tmp_path / "state.img"
    assert main(["reproduce", sid, "--db", str(db), "-o", str(image)]) == 0
    assert image.stat().st_size == t.size
    assert main(["explain", sid, "--db", str(db)]) == 0
    assert f"crash state {sid}" in capsys.readouterr().out


def test_a_search_finding_is_minimised_twice_alike_and_reported(
    run: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db, run_id = run
    with Store.open(db, create=False) as st:
        ids = [s.id for s in st.run_detail(run_id).states]
    found = [stored_state(i, db)[1] for i in ids]
    state = max(found, key=lambda s: len(s.dropped))
    assert state.generator == "reorder" and len(state.dropped) >= 3, [s.id for s in found]
    first, again, _ = minimised_twice(db, run_id, state, monkeypatch)
    assert first.state == again.state and first.candidates == again.candidates
    assert first.target.log_path.parent.name == WID
    # The CLI: the report folder is one path component per state, the README names the
    # workload, and workload.sh is ACE's, base file set first.
    assert main(["triage", state.id, "--no-workload", "--db", str(db)]) == 0
    said = capsys.readouterr().out
    assert f"differing writes: {len(state.dropped)} -> 1 (drops;" in said
    out = Path(said.rsplit("report: ", 1)[1].strip()).parent
    assert out == report.folder(run_id, state.id) and out.parent.name == "triage"
    assert out.name == state.id.replace("/", "_")
    readme = (out / "README.md").read_text()
    assert f"| workload | `{WID}`: {FACTS['ops']} |" in readme
    script = (out / "workload.sh").read_text()
    assert f"harness.guest.ace record --seq 1 --index {FACTS['index']} --noop-sync" in script
    assert script.index('mkdir "$M"/A') < script.index("# mark crashlab:sync:1")
    assert main(["results", "show", run_id, "--db", str(db)]) == 0
    assert f"triage of {state.id}: {out / 'README.md'}" in capsys.readouterr().out


def test_a_search_finding_that_needs_every_differing_write_is_its_own_minimum(
    run: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """When every write the state loses is needed, the minimal state is the state itself,
    named as the search names it (its workload's id first), and its symptom is known."""
    db, run_id = run
    with Store.open(db, create=False) as st:
        ids = [s.id for s in st.run_detail(run_id).states]
    state = max((stored_state(i, db)[1] for i in ids), key=lambda s: len(s.dropped))
    with Store.open(db, create=False) as st:
        bad = CheckResult("host", "stand-in", Outcome.UNREPAIRABLE, 4, 0.0, "lost")
        commit_state(st, run_id, states.Checked(state, [bad]))
    monkeypatch.setattr(judge.parallel, "checked", lost(state.dropped, judge.parallel.checked))
    r = minimal.triage(state.id, db)
    assert r.search.items == state.dropped and r.state.id == state.id
    assert r.found.outcome is Outcome.UNREPAIRABLE


def test_a_search_workload_is_planned_from_aces_ops(run: tuple[Path, str]) -> None:
    """The minimal workload's plan for a search finding: ACE's ops of the workload (base
    file set included) drawn again and matched against the recorded oracle's; the empty
    candidate is the oracle point with the ops that make its names."""
    db, run_id = run
    with Store.open(db, create=False) as st:
        run_row = st.run(run_id)
    oracle = json.loads((FIXTURE / "oracle.json").read_text())
    point = next(o for o in oracle["ops"] if o.get("mark") == "crashlab:sync:2")
    p = opmin.plan(run_row.params, OracleDoc.of(oracle), "crashlab:sync:2", run_row.seed, FACTS)
    assert p.source == {"kind": "ace", "seq": 1, "index": FACTS["index"], "fsync_names": True}
    assert p.point == point["i"] and p.items == tuple(range(point["i"]))
    ops = ace.source_ops(p.source)
    empty = opmin.closed(ops, p.keep(()), True)
    assert empty is not None and empty[-1] == p.point and opmin.valid(ops, empty, True)
    assert len(empty) < len(p.keep(p.items))
    doc = OracleDoc.of(oracle)
    small = workload.script(run_row.params, doc, run_row.seed, keep=empty, ace=FACTS)
    assert small is not None and "the minimal workload triage found" in small.lower()
    # The control's persistence ops are shown, commented out (it never calls them).
    lines = small.split("MOUNTPOINT}\n\n", 1)[1].splitlines()
    body = [ln.removeprefix("# ").split("    # not called")[0] for ln in lines]
    want = [workload.render(p.ops[i]) for i in empty] + ["sync"]
    assert [ln for ln in body if not ln.startswith("mark ")] == want
    # A grammar that no longer draws the recorded ops is not minimised, and says why.
    other = {**FACTS, "index": FACTS["index"] + 1}
    with pytest.raises(opmin.NotMinimised, match="ACE grammar no longer draws"):
        opmin.plan(run_row.params, OracleDoc.of(oracle), "crashlab:sync:2", run_row.seed, other)


def test_a_state_of_a_run_triage_cannot_take_says_which_it_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ZFS pool's state spans several disks' logs: exit 2, the kinds named."""
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        run_id = st.begin_run("zfs-crash", RunKind.ZFS, {"layout": "mirror"}, 1, fs="zfs")
        for disk in ("a", "b"):
            info = LogInfo(disk, f"/nonexistent/{disk}.raw", 9, 1, 1, 1, 0, 4096)
            st.add_log(info, run_id=run_id)
        params = {"id": "feedbeef00000001", "log_hashes": ["a", "b"], "cuts": [3, 4]}
        st.record_state_result(
            run_id,
            StoredState("feedbeef00000001", "a", "consistent", 3, params, "crashlab:sync:1"),
            [],
            {},
            Outcome.DATA_LOSS,
        )
    assert main(["triage", "feedbeef", "--db", str(db)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"crash state feedbeef is of run {run_id}, a zfs run" in err
    assert "take the states of crash-replay, check-log and search runs" in err
    assert "Traceback" not in err
