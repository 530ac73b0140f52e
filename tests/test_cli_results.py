from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.outcome import Outcome
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
from tests.synth import run_results_cli

LOG = LogInfo("feed", "/tmp/w.log", 10, 1, 3, 1, 0, 4096)
LONG = "renamed over an fsync'd file; " * 20


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "lab.sqlite"
    with Store.open(path) as store:
        first = store.begin_run(
            "ext4-rename", RunKind.CRASH, {"data_mode": "journal"}, 1, fs="ext4"
        )
        store.finish_run(first, RunStatus.FAILED, {"error": "image missing"})
        run_id = store.begin_run(
            "ext4-fsync",
            RunKind.CRASH,
            {"data_mode": "ordered", "ops": 40},
            42,
            fs="ext4",
            env=RunEnv(
                accelerator=Accelerator.KVM,
                guest_kernel="6.1.0-18-amd64",
                qemu_version="8.2.1",
                tool_versions={"e2fsck": "1.47.0"},
            ),
        )
        store.add_log(LOG, run_id=run_id)
        outcomes = [Outcome.CONSISTENT] * 6 + [Outcome.REPAIRED, Outcome.TIMEOUT]
        for i, o in enumerate(outcomes):
            st = CrashState(f"fua-{i}", LOG.hash, "fua", prefix=i, description=LONG)
            ch = CheckResult(
                Stage.HOST,
                "e2fsck",
                o,
                0.5,
                exit_status=1 if o != "consistent" else 0,
                output="Pass 1: Checking inodes",
            )
            store.record_state_result(run_id, st, [ch], {Phase.FSCK: 0.5 + i, Phase.MOUNT: 1.0})
        store.finish_run(run_id, RunStatus.DONE)
    return path


def latest(db: Path) -> str:
    with Store.open(db) as store:
        return store.runs(1)[0].id


def test_runs_json_matches_store(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_results_cli(["results", "runs", "--json", "--db", str(db)]) == 0
    data = json.loads(capsys.readouterr().out)
    with Store.open(db) as store:
        expected = store.runs()
    assert [r["id"] for r in data["runs"]] == [r.id for r in expected]
    newest = data["runs"][0]
    assert newest["scenario"] == "ext4-fsync"
    assert newest["accelerator"] == "kvm"
    assert newest["guest_kernel"] == "6.1.0-18-amd64"
    assert newest["status"] == "done"
    assert newest["outcome_counts"] == {"consistent": 6, "timeout": 1, "repaired": 1}
    assert newest["params"] == {"data_mode": "ordered", "ops": 40}
    assert newest["duration_seconds"] >= 0
    assert data["runs"][1]["status"] == "failed"
    assert data["runs"][1]["summary"] == {"error": "image missing"}


def test_runs_limit(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_results_cli(["results", "runs", "--json", "--limit", "1", "--db", str(db)]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 1
    with pytest.raises(SystemExit) as e:
        run_results_cli(["results", "runs", "--limit", "0", "--db", str(db)])
    assert e.value.code == 2


def test_runs_table(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_results_cli(["results", "runs", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert latest(db) in out  # whole, never folded: people copy it
    for text in (
        "ext4-fsync",
        "6.1.0-18-amd64",
        "kvm",
        "repaired 1",
        "timeout 1",
        "done",
        "failed",
    ):
        assert text in out


def test_show_json_matches_store(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = latest(db)
    assert run_results_cli(["results", "show", run_id[:6], "--json", "--db", str(db)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run"]["id"] == run_id
    assert data["run"]["params"] == {"data_mode": "ordered", "ops": 40}
    assert data["run"]["tool_versions"] == {"e2fsck": "1.47.0"}
    assert data["outcome_counts"] == {"consistent": 6, "timeout": 1, "repaired": 1}
    rec = {r["phase"]: r for r in data["recovery"]}
    assert rec["fsck"]["n"] == 8 and rec["fsck"]["max"] == 7.5 and rec["fsck"]["mean"] == 4.0
    assert rec["mount"] == {
        "phase": "mount",
        "n": 8,
        "mean": 1.0,
        "stdev": 0.0,
        "min": 1.0,
        "p50": 1.0,
        "p95": 1.0,
        "max": 1.0,
    }
    flagged = {s["id"]: s["outcome"] for s in data["states"] if s["outcome"] != "consistent"}
    assert flagged == {"fua-6": "repaired", "fua-7": "timeout"}
    # Long strings survive intact: the console must not wrap JSON.
    assert data["states"][0]["description"] == LONG
    assert data["states"][6]["checks"][0]["exit_status"] == 1


def test_show_table(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_results_cli(["results", "show", latest(db), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    for text in (
        "ext4-fsync",
        "data_mode",
        '"ordered"',
        "recovery time",
        "fsck",
        "mount",
        "fua-6",
        "fua-7",
        "repaired",
        "timeout",
        "1.47.0",
    ):
        assert text in out
    assert "fua-3" not in out  # consistent states are not listed


def test_show_failed_run_summary(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Store.open(db) as store:
        failed = store.runs()[1].id
    assert run_results_cli(["results", "show", failed, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "image missing" in out and "no states checked" in out


def test_unknown_run_is_input_error(db: Path) -> None:
    with pytest.raises(InputError) as e:
        run_results_cli(["results", "show", "nosuchrun", "--db", str(db)])
    assert e.value.hint and latest(db) in e.value.hint


def test_missing_db_is_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRASHLAB_RESULTS", str(tmp_path / "results"))
    with pytest.raises(InputError) as e:
        run_results_cli(["results", "runs"])
    assert str(tmp_path / "results" / "lab.sqlite") in e.value.message
    assert e.value.hint and "no runs yet" in e.value.hint
    assert not (tmp_path / "results").exists()


def test_default_db_from_environment(
    db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CRASHLAB_RESULTS", str(db.parent))
    assert run_results_cli(["results", "runs", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 2


def test_through_main(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli.main import main

    assert main(["results", "runs", "--json", "--db", str(db)]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 2
    assert main(["results", "runs", "--db", str(tmp_path / "none.sqlite")]) == 2
    err = " ".join(capsys.readouterr().err.split())  # the error console wraps at 80
    assert "no runs yet" in err and "Traceback" not in err
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    assert main(["results", "show", "x", "--db", str(notes)]) == 2
    assert "not an SQLite database" in " ".join(capsys.readouterr().err.split())


def test_piped_show_fits_100_columns_and_cuts_nothing(db: Path) -> None:
    """Piped (``| less``, a CI log: no terminal, no COLUMNS), ``results show`` fits 100
    columns: a long value wraps inside its cell instead of widening the table (issue
    48: it printed lines of 1,326 characters), and nothing is cut -- the state's id is
    whole on its line and every character of its 600-character description is there."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    argv = [sys.executable, "-m", "harness", "results", "show", latest(db), "--db", str(db)]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    assert "…" not in out, out
    assert max(len(line) for line in out.splitlines()) <= 100, out
    assert any("fua-6" in line.split() or "│ fua-6 " in line for line in out.splitlines())
    cells = "".join(line.split("│")[6].strip() for line in out.splitlines() if line.count("│") == 8)
    assert LONG.replace(" ", "") in cells.replace(" ", "")
    wide = subprocess.run(argv, capture_output=True, text=True, check=True,
                          env={**env, "COLUMNS": "300"}).stdout  # fmt: skip
    assert max(len(line) for line in wide.splitlines()) > 100  # COLUMNS still wins
