"""Which promise a finding broke (issue 37 item 3): the guest oracle's profile and
``promise`` kept by the guest check's judge, stored with the verdict (schema 10), and
shown by ``results show`` -- the POSIX floor told from a stronger profile's promise --
with a store from before schema 10 still opening, its findings saying nothing stored."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
from pathlib import Path

from harness.check import guest as guestcheck
from harness.check import promises
from harness.model import oracle
from harness.outcome import Outcome
from harness.store import schema
from harness.store.db import (
    APPLICATION_ID,
    CheckResult,
    CrashState,
    LogInfo,
    Stage,
    Store,
)
from harness.store.model import Promise, RunStatus
from tests.guestfacts import facts
from tests.synth import run_results_cli

L, C = Outcome.DATA_LOSS, Outcome.CONSISTENT


def test_the_oracle_says_its_profile_and_the_judge_keeps_it(tmp_path: Path) -> None:
    got = oracle.verify(str(tmp_path), {"marks": [], "profile": "ordered-metadata"}, None)
    assert (got.profile, got.promise) == ("ordered-metadata", None)
    verify = {"ok": False, "mark": "m2", "missing": ["A/bar"]}
    r = guestcheck.judge(facts(verify={**verify, "profile": "ordered-metadata",
                                       "promise": "fsync-names"}))  # fmt: skip
    assert (r.outcome, r.profile, r.promise) == (L, "ordered-metadata", "fsync-names")
    assert promises.broken(L, [r]) == ("ordered-metadata", "fsync-names")
    assert promises.rule_of(L, [r]) == ("file-missing", "A/bar")
    # a refused mount breaks the floor, whatever the profile
    mount = guestcheck.judge(facts(mount={"rc": 32, "output": "wrong fs type"}))
    assert promises.broken(mount.outcome, [mount]) == (None, None)  # no oracle ran


def _state(i: int) -> CrashState:
    return CrashState(f"m-{i}", "h", "mark", prefix=i, last_mark=f"crashlab:sync:{i}")


def _show(db: Path, run: str, *json_out: str) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run_results_cli(["results", "show", run, "--db", str(db), *json_out]) == 0
    return buf.getvalue()


def _run(st: Store) -> str:
    run = st.begin_run("btrfs-fsync", "crash", {"fs": {"type": "btrfs"}}, 1, fs="btrfs")
    st.add_log(LogInfo("h", "/nonexistent/log.raw", 100, 5, 10, 4, 0, 1 << 20), run_id=run)
    judged = [
        (C, Promise("ordered-metadata")),
        (L, Promise("ordered-metadata", "posix", "content")),
        (L, Promise("ordered-metadata", "ordered-metadata", "file-missing")),
    ]
    for i, (o, p) in enumerate(judged):
        check = CheckResult(Stage.GUEST, "mount+verify", o, 0.1)
        st.record_state_result(run, _state(i), [check], {}, o, p)
    st.finish_run(run, RunStatus.DONE)
    return run


def test_results_show_tells_the_posix_floor_from_a_stronger_promise(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        run = _run(st)
    text = _show(db, run)
    assert "judged by" in text and "ordered-metadata" in text
    assert "posix (POSIX floor): content" in text
    assert "ordered-metadata (> POSIX): file-missing" in text
    assert "docs/verdicts.md rule 18" in " ".join(text.split())  # the source, once
    states = json.loads(_show(db, run, "--json"))["states"]
    assert [s["promise"] for s in states][1] == {
        "profile": "ordered-metadata", "broken": "posix", "rule": "content"
    }  # fmt: skip


def test_a_store_from_before_schema_10_opens_and_says_nothing_stored(tmp_path: Path) -> None:
    db = tmp_path / "v9.sqlite"
    conn = sqlite3.connect(db)
    for stmt in [s for m in schema.MIGRATIONS[:9] for s in m]:
        conn.execute(stmt)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 9")
    conn.execute(
        "INSERT INTO runs (id, scenario, kind, params, started_at, status, fs) VALUES"
        " ('r9', 'btrfs-fsync', 'crash', '{}', '2026-01-01T00:00:00Z', 'done', 'btrfs')"
    )
    conn.execute(
        "INSERT INTO crash_states (run_id, id, log_hash, generator, prefix, params)"
        " VALUES ('r9', 'm-1', 'h', 'mark', 1, '{}')"
    )
    conn.execute(
        "INSERT INTO verdicts (run_id, state_id, outcome, decided_at)"
        " VALUES ('r9', 'm-1', 'data_loss', '2026-01-01T00:00:00Z')"
    )
    conn.commit()
    conn.close()
    with Store.open(db) as st:
        assert st.execute("PRAGMA user_version") == [(schema.SCHEMA_VERSION,)]
        (state,) = st.run_detail("r9").states
    assert state.promise is None
    text = _show(db, "r9")
    assert "data_loss" in text and "judged by" not in text


def test_what_is_stored_and_what_a_twin_takes_again() -> None:
    from harness.crashstate import checking, onelog
    from harness.store.model import CheckRow

    verify = {"ok": False, "mark": "m2", "mismatched": [{"path": "bar", "expected": "x"}]}
    r = guestcheck.judge(facts(verify={**verify, "profile": "fsync-names", "promise": "posix"}))
    stored = onelog._promise(r.outcome, [r])
    assert stored == Promise("fsync-names", "posix", "content")
    # a state that takes this verdict from the store has its checks' rows, not the note
    row = CheckRow("guest", "mount+verify", "data_loss", 0, 0.1, "reused output")
    twin = checking._from_row(row, stored)
    assert onelog._promise(twin.outcome, [twin]) == stored
    # a refused mount: no oracle ran, and the floor broke
    mount = guestcheck.judge(facts(mount={"rc": 32, "output": "wrong fs type"}))
    assert onelog._promise(mount.outcome, [mount]) == Promise(None, "posix", "guest mount")
    clean = guestcheck.judge(facts(verify={"ok": True, "profile": "posix", "promise": None}))
    assert onelog._promise(clean.outcome, [clean]) == Promise("posix")


def test_triage_reports_the_stored_promise_or_the_oracle_s_profile() -> None:
    from types import SimpleNamespace
    from typing import Any, cast

    from harness.model.oracle.doc import OracleDoc
    from harness.triage import report

    def result(promise: Promise | None, oracle: dict[str, Any]) -> Any:
        doc = OracleDoc.of(oracle)
        return cast(Any, SimpleNamespace(target=SimpleNamespace(promise=promise, oracle=doc)))

    stored = result(Promise("fsync-names", "fsync-names", "file-missing"), {})
    assert report.promise(stored) == ("fsync-names", "fsync-names", "file-missing")
    rows = dict(map(report._split, promises.explain(*report.promise(stored))))
    assert rows["judged by"] == "fsync-names"
    assert rows["promise broken"].startswith("fsync-names (stronger than POSIX) -- journaled")
    assert rows["rule"].startswith("file-missing -- rule 1: a durable name must exist")
    # a state stored before schema 10: its run's oracle's profile, nothing of the break
    old = result(None, {"fsync_names": False, "marks": []})
    assert report.promise(old) == ("posix", None, None)
    assert promises.explain(None, None, None) == [
        "promise: not stored (checked before the lab kept it, or no oracle)"
    ]
