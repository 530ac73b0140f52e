"""Every count the dashboard shows (``results serve``) comes from the runs' stored
accounts (harness/outcome.py's one rule, migration 9's outcome classes and expected
items), so the page and ``results show`` cannot disagree -- checked on a store where a
naive count and the rule do: ext2's ``repaired``, expected without a journal
(``outcome.expected_without_journal``), once as the lifecycle stores it now and once as
a store from before migration 9 has it (its account, no expected items). An empty chart
says so, with the command that makes one."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

from harness.outcome import FINDINGS, Outcome, Tallied, expected_without_journal, tally
from harness.report import dashboard, serve_meta
from harness.store.db import Store
from tests.synth import add_run, run_results_cli
from tests.test_serve import start, stop

C, R, L = Outcome.CONSISTENT, Outcome.REPAIRED, Outcome.DATA_LOSS
STATES = [C, R, R, L]  # ext2: two repaired (expected) and one loss (the one finding)


def ext2_run(st: Store, *, before_9: bool) -> str:
    run = add_run(st, "ext2-fsync", "ext2", None, STATES)
    items = [
        Tallied(f"fua-{i:03d}", o, expected_without_journal(o, journaled=False))
        for i, o in enumerate(STATES)
    ]
    st.set_account(run, tally(items))
    if before_9:  # the account, but no item marked expected in v_states
        st.execute("DELETE FROM expected_items WHERE run_id = ?", (run,))
    return run


def shown(run: str, db: Path) -> dict[str, Any]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run_results_cli(["results", "show", run, "--db", str(db), "--json"]) == 0
    out: dict[str, Any] = json.loads(buf.getvalue())["run"]
    return out


def test_the_page_counts_what_results_show_counts(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        runs = [ext2_run(st, before_9=False), ext2_run(st, before_9=True)]
        naive = st.execute(
            "SELECT count(*) FROM verdicts WHERE run_id = ? AND outcome IN (?, ?, ?, ?)",
            (runs[0], *map(str, FINDINGS)),
        )
    assert naive == [(3,)]  # what counting the verdicts would say
    show = {r: shown(r, db) for r in runs}
    for r in runs:
        assert show[r]["findings"] == 1 and show[r]["expected_outcomes"] == {"repaired": 2}
    s = start(db)
    try:
        page = {
            r: s.json(f"lab/findings.json?run={r[:8]}&_shape=array") for r in runs
        }  # the "findings" query, state by state
        per_run = {r["run_id"]: r for r in s.json("lab/findings_per_run.json?_shape=array")}
        outcomes = s.json("lab/outcomes_by_fs_mode.json?_shape=array")
    finally:
        stop(s)
    for r in runs:
        want = ["data_loss"] * show[r]["findings"]
        assert [f["outcome"] for f in page[r]] == want == ["data_loss"]
        assert per_run[r]["findings"] == show[r]["findings"]
    # the chart's rows: the account's, expected apart
    got = {(o["outcome"], o["expected"], o["counts_as"]): o["states"] for o in outcomes}
    assert got == {
        ("consistent", 0, "clean"): 2,
        ("repaired", 1, "expected"): 4,
        ("data_loss", 0, "finding"): 2,
    }


def test_an_empty_chart_says_so_and_how_to_make_one(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        ext2_run(st, before_9=False)
        meta = serve_meta.metadata("lab", db, "now", st)
    charts = meta["plugins"]["datasette-dashboards"][dashboard.SLUG]["charts"]
    assert charts["outcomes"]["library"] == "vega-lite"  # a crash run: drawn
    nightly = charts["findings_per_nightly"]  # no campaign yet
    assert nightly["library"] == "markdown" and "query" not in nightly
    assert "No runs of this kind yet" in nightly["display"]
    assert "`scenario campaign run campaigns/nightly.toml`" in nightly["display"]
    for slug in ("recovery_vs_size", "resilver_vs_fill", "io_per_cell"):
        assert "No runs of this kind yet. Make one with `scenario run" in charts[slug]["display"]
