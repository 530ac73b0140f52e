"""A disk budget (``scenario lab prune``, harness/store/prune.py): the least recently used
kernels, images and run folders go first, and never the store, a running or resumable
run's folder, a finding's log, a triaged run, the current image, a kernel a running run
boots or an unfinished campaign names, nor another store's run. A cache and a store
built here, files of known sizes (real bytes: the budget counts blocks on disk)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from harness.cli import main as cli
from harness.errors import InputError
from harness.outcome import Outcome
from harness.store import prune
from harness.store.db import (
    CheckResult,
    CrashState,
    LogInfo,
    RunEnv,
    RunKind,
    RunStatus,
    Stage,
    Store,
)

MB = 1 << 20
LOG = LogInfo("feed", "/tmp/w.log", 10, 1, 3, 1, 0, 4096)


def put(d: Path, size: int) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "blob").write_bytes(b"\xcd" * size)
    return d


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, str]]:
    """A store and its cache: runs old to new, each with its folder and its kernel."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("CRASHLAB_CACHE", str(cache))
    monkeypatch.delenv("CRASHLAB_WORK", raising=False)
    db = tmp_path / "lab.sqlite"
    ids: dict[str, str] = {}
    with Store.open(db) as st:
        for name, status, kernel in (
            ("old-clean", RunStatus.DONE, "k-old"),
            ("finding", RunStatus.DONE, "k-old"),
            ("resumable", RunStatus.INTERRUPTED, "k-old"),
            ("new-clean", RunStatus.DONE, "k-new"),
            ("running", RunStatus.RUNNING, "k-live"),
        ):
            env = RunEnv(guest_kernel=kernel)
            rid = st.begin_run(name, RunKind.CRASH, {"kernel": kernel}, 1, fs="ext4", env=env)
            ids[name] = rid
            if name == "finding":
                st.add_log(LOG, run_id=rid)
                ch = CheckResult(Stage.GUEST, "mount+verify", Outcome.DATA_LOSS, 1.0)
                st.record_state_result(rid, CrashState("s", LOG.hash, "mark", prefix=1), [ch], {})
            if status is not RunStatus.RUNNING:
                st.finish_run(rid, status)
            put(cache / "work" / "runs" / rid, 2 * MB)
            time.sleep(0.01)  # started_at orders them
        st.begin_campaign("c1", "nightly", "n.toml", "h", "{}", "2026-12-07T00:00:00", "x", 1)
        st.add_campaign_elements("c1", [("e", 0, "ext4-fsync", json.dumps(["kernel=k-next"]), 1)])
    put(cache / "work" / "runs" / "not-ours", 2 * MB)
    for k in ("k-old", "k-new", "k-live", "k-next", "k-unused"):
        put(cache / "kernels" / k, 3 * MB)
    put(cache / "images" / "current", 4 * MB)
    put(cache / "images" / "stale", 4 * MB)
    return db, ids


def test_the_least_recently_used_go_first_and_the_kept_never(
    lab: tuple[Path, dict[str, str]],
) -> None:
    db, ids = lab
    with Store.open(db, create=False) as st:
        items = prune.survey(st, "current")
    keep = {i.path.name: i.keep for i in items if i.keep}
    assert keep == {
        ids["finding"]: "a finding", ids["resumable"]: "resumable", ids["running"]: "running",
        "not-ours": "not a run of lab.sqlite", "k-live": "a running run boots it",
        "k-next": "an unfinished campaign names it", "current": "the current recipe's image",
    }  # fmt: skip
    total = sum(i.size for i in items)
    going, after = prune.plan(items, total - 5 * MB)
    assert after <= total - 5 * MB
    assert [i.used for i in going] == sorted(i.used for i in going)  # oldest use first
    assert {i.path.name for i in going} <= {"k-unused", "stale", "k-old", "k-new",
                                           ids["old-clean"], ids["new-clean"]}  # fmt: skip
    everything, _ = prune.plan(items, 0)
    assert {i.path.name for i in everything} == {"k-unused", "stale", "k-old", "k-new",
                                                ids["old-clean"], ids["new-clean"]}  # fmt: skip
    assert [i.path.name for i in everything].index(ids["old-clean"]) < [
        i.path.name for i in everything
    ].index(ids["new-clean"])


def test_prune_removes_and_says_when_the_budget_cannot_be_met(
    lab: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db, ids = lab
    assert cli.main(["lab", "prune", "--budget", "1M", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "the budget cannot be met" in out
    runs = tmp_path / "cache" / "work" / "runs"
    assert not (runs / ids["old-clean"]).exists() and (runs / ids["finding"]).exists()
    assert (runs / ids["running"]).exists() and (runs / "not-ours").exists()
    assert not (tmp_path / "cache" / "kernels" / "k-unused").exists()
    assert (tmp_path / "cache" / "kernels" / "k-next").exists() and db.exists()


def test_a_budget_is_needed_and_a_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(prune.BUDGET_ENV, raising=False)
    with pytest.raises(InputError, match="no disk budget"):
        prune.budget(None)
    with pytest.raises(InputError, match="--budget 'lots'"):
        prune.budget("lots")
    monkeypatch.setenv(prune.BUDGET_ENV, "2G")
    assert prune.budget(None) == 2 << 30
