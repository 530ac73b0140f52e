"""``keep_logs = "findings"``: a finished search run lets go of the logs of workloads
whose every state is judged and none a finding, and keeps a finding's. On the host: the
recorded fixture of tests/data/search (its README) laid where the search's recorder keeps
a workload, the real replayer and host checker; a finding is made by the stand-in
checker of tests/synth.py (a state missing the log's last write is unrepairable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.check import parallel
from harness.cli import ui
from harness.cli.main import main
from harness.config import scenario
from harness.crashstate import workloads as record
from harness.experiments import lifecycle
from harness.experiments.search import summary
from harness.record import logwrites
from harness.store.db import RunStatus, Store
from tests.synth import lost, without_image
from tests.test_triage_search import SETTINGS, WID, lay_fixture


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: str) -> lifecycle.Report:
    without_image(tmp_path, monkeypatch)
    monkeypatch.setattr(record, "record_batch", lay_fixture)
    sc = scenario.load("ace-seq1-ci", [*SETTINGS, f"keep_logs={keep}"])
    return lifecycle.execute(sc, db=tmp_path / "lab.sqlite")


def test_a_clean_workloads_log_goes_when_its_run_finishes_and_reproduce_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    r = _run(tmp_path, monkeypatch, "findings")
    assert r.counts == {"consistent": r.items} and r.items > 0, r.counts
    rec = record.load(lifecycle.run_dir(r.run_id), WID)
    assert rec is not None and not rec.log.exists()
    with Store.open(tmp_path / "lab.sqlite", create=False) as st:
        ids = sorted(s.id for s in st.run_detail(r.run_id).states)
    assert sorted(rec.dropped) == ids
    dropped = r.summary["logs_dropped"]
    assert dropped["workloads"] == 1 and dropped["freed_bytes"] > 0, dropped
    summary.print_body(ui.console(), r)
    assert "logs let go: 1 workloads' (" in " ".join(capsys.readouterr().out.split())
    # The verdicts stay; a state of the workload can no longer be rebuilt, and says why.
    db = str(tmp_path / "lab.sqlite")
    assert main(["reproduce", ids[0], "--db", db, "-o", str(tmp_path / "s.img")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"the log of workload {WID} was let go when its run {r.run_id} finished" in err
    assert f"workload.indices=[{rec.facts['index']}]" in err
    assert "Traceback" not in err
    assert main(["results", "show", r.run_id, "--db", db]) == 0
    # A run taken up again (as after a failure) counts those states, judged, checks none.
    with Store.open(tmp_path / "lab.sqlite", create=False) as st:
        st.finish_run(r.run_id, RunStatus.FAILED, {})
    again = _run(tmp_path, monkeypatch, "findings")
    assert again.run_id == r.run_id and again.resumed
    assert again.items == again.earlier == r.items, (again.items, again.earlier)
    assert again.summary["logs_dropped"] == dropped


def test_a_finding_keeps_its_workloads_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fixture_log = tmp_path / "probe"
    lay_fixture(fixture_log, None, [{"id": WID}])  # type: ignore[arg-type]
    with logwrites.open_log(record.folder(fixture_log, WID) / "log.raw") as lg:
        last = max(e.index for e in lg.entries if e.is_write)
    monkeypatch.setattr(parallel, "checked", lost(last, parallel.checked))
    r = _run(tmp_path, monkeypatch, "findings")
    assert r.counts.get("unrepairable", 0) > 0, r.counts
    rec = record.load(lifecycle.run_dir(r.run_id), WID)
    assert rec is not None and rec.log.exists() and not rec.dropped
    assert r.summary["logs_dropped"] == {"workloads": 0, "freed_bytes": 0}


def test_every_log_stays_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = _run(tmp_path, monkeypatch, "all")
    rec = record.load(lifecycle.run_dir(r.run_id), WID)
    assert rec is not None and rec.log.exists() and "logs_dropped" not in r.summary


def test_a_workload_whose_disk_failed_is_recorded_once_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A guest disk's I/O error while recording (the host's file failed a write: once in
    281 workloads on 6.12.117) is the lab's, not the workload's: the search records that
    workload once more, keeps the first recording's facts aside, and counts it."""
    import json
    import shutil

    from harness.model import kernlog
    from tests.test_triage_search import FACTS

    calls: list[str] = []

    def flaky(rdir: Path, fs: object, workloads: list[dict[str, object]], **_: object) -> object:
        calls.extend(str(w["id"]) for w in workloads)
        d = record.folder(rdir, WID)
        d.mkdir(parents=True, exist_ok=True)
        if len(calls) == 1:
            failed = {
                **FACTS,
                "status": "failed",
                "error": kernlog.DISK_FAILED,
                "kernel": ["I/O error"],
            }
            (d / "recording.json").write_text(json.dumps(failed))
            return {}
        lay_fixture(tmp_path / "laid", fs, workloads)  # type: ignore[arg-type]
        for f in ("log.raw", "oracle.json", "recording.json"):
            shutil.copy(record.folder(tmp_path / "laid", WID) / f, d / f)
        return {}

    without_image(tmp_path, monkeypatch)
    monkeypatch.setattr(record, "record_batch", flaky)
    r = lifecycle.execute(scenario.load("ace-seq1-ci", SETTINGS), db=tmp_path / "lab.sqlite")
    assert calls == [WID, WID] and r.summary["rerecorded_after_disk_failed"] == 1
    assert r.summary["workload_status"] == {"recorded": 1}, r.summary
    assert r.counts == {"consistent": r.items} and r.items > 0, r.counts  # no harness_error
    kept = record.folder(lifecycle.run_dir(r.run_id), WID) / "recording.disk-failed.json"
    assert json.loads(kept.read_text())["error"] == kernlog.DISK_FAILED
