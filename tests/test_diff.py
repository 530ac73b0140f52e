"""diff between runs, baselines and `results check` exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.report import diff
from harness.store.db import RunKind, Store
from tests.synth import run_results_cli

BASELINE = """
[scenarios.ext4-ordered-fsync]
allowed = ["consistent", "repaired"]
max = { repaired = 1 }

[scenarios.xfs-fsync]
allowed = ["consistent"]
"""


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    p = tmp_path / "baseline.toml"
    p.write_text(BASELINE)
    return p


def test_diff_matches_states_by_id(db: tuple[Path, dict[str, str]]) -> None:
    path, ids = db
    with Store.open(path) as st:
        d = diff.diff_runs(st, ids["ordered"], ids["ordered2"])
    assert d.matched == 4
    assert [(c.state_id, c.before, c.after) for c in d.changes] == [
        ("fua-001", "consistent", "repaired"),
        ("fua-003", "repaired", "data_loss"),
    ]
    assert all(c.worse for c in d.changes)
    fsck = next(p for p in d.phases if p.phase == "fsck")
    assert fsck.n == 4 and fsck.mean_after == pytest.approx(2 * fsck.mean_before)
    assert any("guest kernel" in n for n in d.notes)
    # What compares across kernels: each run's outcome counts, before and after.
    befores = {o: a for o, (a, _) in d.outcomes.items()}
    afters = {o: b for o, (_, b) in d.outcomes.items()}
    assert sum(befores.values()) == sum(afters.values()) >= 4
    assert afters.get("data_loss", 0) == befores.get("data_loss", 0) + 1


def test_diff_of_different_scenarios_notes_it(db: tuple[Path, dict[str, str]]) -> None:
    path, ids = db
    with Store.open(path) as st:
        d = diff.diff_runs(st, ids["xfs"], ids["journal"])
    assert any("different scenarios" in n for n in d.notes)
    # fua-002 exists only in the xfs run
    assert ("fua-002", "consistent", None) in [(c.state_id, c.before, c.after) for c in d.changes]
    assert d.worse == []


def test_check_against_baseline(db: tuple[Path, dict[str, str]], baseline: Path) -> None:
    path, ids = db
    b = diff.load_baseline(baseline)
    with Store.open(path) as st:
        assert diff.check_run(st, ids["ordered"], b).regressions == []
        bad = diff.check_run(st, ids["ordered2"], b).regressions
        assert len(bad) == 1 and "data_loss" in bad[0] and "fua-003" in bad[0]
        assert diff.check_run(st, ids["xfs"], b).regressions == []
        missing = diff.check_run(st, ids["journal"], b)
        assert missing.regressions == [] and "not in the baseline" in missing.notes[0]
        assert diff.check_run(st, ids["journal"], b, strict=True).regressions
        unfinished = st.begin_run("xfs-fsync", RunKind.CRASH, {}, 1, fs="xfs")
        assert "did not finish" in diff.check_run(st, unfinished, b).regressions[0]


def test_max_count_regresses(db: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    path, ids = db
    p = tmp_path / "b.json"
    p.write_text(json.dumps({"scenarios": {"ext4-ordered-fsync": {"max": {"repaired": 0}}}}))
    with Store.open(path) as st:
        r = diff.check_run(st, ids["ordered"], diff.load_baseline(p))
    assert r.regressions == ["1 state(s) repaired, baseline allows at most 0"]


@pytest.mark.parametrize(
    "text",
    [
        "[scenarios.x]\nallowed = ['fine']\n",
        "[scenarios.x]\nalowed = ['consistent']\n",
        "scenarios = 3\n",
        "[scenarios.x\n",
        "[scenarios.x]\nmax = { repaired = -1 }\n",
    ],
)
def test_bad_baseline_is_input_error(tmp_path: Path, text: str) -> None:
    p = tmp_path / "b.toml"
    p.write_text(text)
    with pytest.raises(InputError):
        diff.load_baseline(p)


def test_cli_exit_statuses(
    db: tuple[Path, dict[str, str]], baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, ids = db
    common = ["--db", str(path), "--baseline", str(baseline)]
    assert run_results_cli(["results", "check", ids["ordered"], ids["xfs"], *common]) == 0
    assert "within the baseline" in capsys.readouterr().out
    assert run_results_cli(["results", "check", ids["ordered"], ids["ordered2"], *common]) == 1
    assert "REGRESSED" in capsys.readouterr().out
    assert (
        run_results_cli(["results", "diff", ids["ordered"], ids["ordered2"], "--db", str(path)])
        == 0
    )
    text = capsys.readouterr().out
    assert "fua-003" in text and "data_loss" in text and "fsck" in text
    assert (
        run_results_cli(["results", "diff", ids["ordered"], ids["ordered2"], *common, "--json"])
        == 1
    )
    out = json.loads(capsys.readouterr().out)
    assert out["check"]["regressed"] and len(out["changes"]) == 2
