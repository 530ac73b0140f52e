"""Campaign bookkeeping: loading, resume after SIGKILL, quarantine, stall budgets.

The engine takes its element runner as a callable; these tests give it a fake one that
writes a run into the (real SQLite) store the way ``run.execute`` does -- resuming an
unfinished run with the same scenario, parameters and seed, one transaction per state
-- so that killing the campaign process at random points tests the real bookkeeping.
The one test that runs campaigns/ci.toml with real guests is marked ``vm``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import paths
from harness.campaign import runner as campaign
from harness.campaign.runner import ElementContext, ElementStatus, Engine
from harness.config import campaign as config_campaign
from harness.config.campaign import Element
from harness.errors import HarnessError, InputError, ToolMissing
from harness.outcome import Outcome
from harness.store.db import CheckResult, CrashState, LogInfo, RunKind, RunStatus, Stage, Store

REPO = paths.REPO
STATES = 6


def fake_runner(el: Element, ctx: ElementContext, delay: float = 0.0) -> str:
    """A resumable 'scenario run' of STATES states, each committed on its own."""
    params = {"set": list(el.overrides)}
    with Store.open(ctx.db) as st:
        run_id = st.find_resumable_run(el.scenario, params, el.seed)
        if run_id is None:
            run_id = st.begin_run(el.scenario, RunKind.CRASH, params, el.seed, fs="ext2")
        else:
            st.resume_run(run_id)
        log = LogInfo(f"log-{run_id}", "/dev/null", STATES, 0, 0, 0, 0, 0)
        st.add_log(log, run_id=run_id)
        done = st.done_state_ids(run_id)
        for i in range(STATES):
            sid = f"fua-{i}"
            if sid in done:
                continue
            time.sleep(delay)
            ctx.progress("checking", i, STATES)
            st.record_state_result(
                run_id,
                CrashState(sid, log.hash, "fua", prefix=i),
                [CheckResult(Stage.HOST, "fsck", Outcome.CONSISTENT, 0.01)],
                {"fsck": 0.01},
            )
        st.finish_run(run_id, RunStatus.DONE)
    return run_id


def write(tmp_path: Path, text: str, name: str = "camp.toml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


CAMP = """
    description = "test"
    [[run]]
    scenario = "ext4-ordered-fsync"
    matrix = { "fs.data_mode" = ["ordered", "journal"], "workload.ops" = [10, 20] }
    set = ["check.guest=false"]
    repetitions = 2
    [[run]]
    scenario = "xfs-fsync"
    seeds = [7]
    [[run]]
    scenario = "zfs-does-not-exist-yet"
    optional = true
"""


def test_load_expands_matrix_and_seeds(tmp_path: Path) -> None:
    c = config_campaign.load(write(tmp_path, CAMP))
    assert len(c.elements) == 2 * 2 * 2 + 1
    first = c.elements[0]
    assert first.overrides == ("check.guest=false", "fs.data_mode=ordered", "workload.ops=10")
    assert [e.seed for e in c.elements[:2]] == [1, 2]
    assert c.elements[-1].seed == 7 and c.elements[-1].scenario == "xfs-fsync"
    assert c.skipped == ("zfs-does-not-exist-yet",)
    assert len({e.key for e in c.elements}) == len(c.elements)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('[[run]]\nscenario = "ext9-fsync"\n', ["unknown scenario", "ext9-fsync"]),
        ('[[run]]\nscenario = "xfs-fsync"\nset = ["fs.colour=red"]\n', ["colour"]),
        ('[[run]]\nscenario = "xfs-fsync"\nrepetitons = 2\n', ["repetitons"]),
        ('[[run]]\nscenario = "xfs-fsync"\nmatrix = { "workload.ops" = [] }\n', ["non-empty"]),
        ('[[run]]\nscenario = "xfs-fsync"\n[[run]]\nscenario = "xfs-fsync"\n', ["twice"]),
        ("description = 'nothing'\n", ["run"]),
    ],
)
def test_bad_campaign_is_input_error(tmp_path: Path, text: str, words: list[str]) -> None:
    with pytest.raises(InputError) as e:
        config_campaign.load(write(tmp_path, text))
    for w in words:
        assert w in e.value.message + (e.value.hint or "")


def test_cli_unknown_scenario_exits_2(tmp_path: Path) -> None:
    p = write(tmp_path, '[[run]]\nscenario = "nope"\n')
    r = subprocess.run(
        [sys.executable, "-m", "harness", "campaign", "run", str(p), "--db", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 2 and "unknown scenario" in r.stderr and "Traceback" not in r.stderr


def small(tmp_path: Path, reps: int = 3, extra: str = "") -> config_campaign.Campaign:
    return config_campaign.load(
        write(tmp_path, f'{extra}\n[[run]]\nscenario = "ext2-fsync"\nrepetitions = {reps}\n')
    )


def test_runs_every_element_once_and_skips_finished(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    c = small(tmp_path)
    calls: list[Element] = []

    def runner(el: Element, ctx: ElementContext) -> str:
        calls.append(el)
        return fake_runner(el, ctx)

    report = Engine(c, db, runner=runner).run()
    assert [r.status for r in report.rows] == [ElementStatus.DONE] * 3
    assert len(calls) == 3 and not report.resumed
    with Store.open(db) as st:
        assert st.execute("SELECT count(*) FROM runs")[0][0] == 3
        assert st.execute("SELECT count(*) FROM verdicts")[0][0] == 3 * STATES
    # Finished: the next invocation is a new campaign (tomorrow night's).
    again = Engine(c, db, runner=runner).run()
    assert again.campaign_id != report.campaign_id and len(calls) == 6


def failing_on_seed_2(
    error: Exception, calls: list[int | None]
) -> Callable[[Element, ElementContext], str]:
    """fake_runner, except that the element of seed 2 raises ``error``; seeds in ``calls``."""

    def runner(el: Element, ctx: ElementContext) -> str:
        calls.append(el.seed)
        if el.seed == 2:
            raise error
        return fake_runner(el, ctx)

    return runner


def test_failing_element_is_quarantined_not_looped(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    c = small(tmp_path, extra="max_failures = 3")
    calls: list[int | None] = []
    runner = failing_on_seed_2(HarnessError("guest did not boot"), calls)
    report = Engine(c, db, runner=runner).run()
    assert calls == [1, 2, 2, 2, 3]
    q = report.by_status(ElementStatus.QUARANTINED)
    assert [r.element.seed for r in q] == [2]
    assert q[0].failures == 3 and "did not boot" in (q[0].last_error or "")
    assert len(report.by_status(ElementStatus.DONE)) == 2


def test_a_missing_host_tool_stops_the_campaign_and_quarantines_nothing(tmp_path: Path) -> None:
    """chaos.py took QEMU off PATH during a campaign: the element failed three times within
    a second and was quarantined, and so would every element after it. A missing tool is
    the host's: the campaign stops with it (exit 3), the element stays pending with no
    failure counted, and the rerun does it."""
    db = tmp_path / "lab.sqlite"
    c = small(tmp_path, extra="max_failures = 3")
    calls: list[int | None] = []
    runner = failing_on_seed_2(ToolMissing("qemu-system-x86_64", "qemu-system-x86"), calls)
    with pytest.raises(ToolMissing) as e:
        Engine(c, db, runner=runner).run()
    assert e.value.exit_status == 3 and calls == [1, 2]
    report = Engine(c, db, runner=fake_runner).run()
    assert report.resumed and len(report.by_status(ElementStatus.DONE)) == 3
    assert all(r.failures == 0 for r in report.rows)


def test_killed_element_counts_as_interruption(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    c = small(tmp_path, reps=1, extra="max_interruptions = 2")
    engine = Engine(c, db, runner=fake_runner)
    with Store.open(db) as st:
        cid, _ = engine._adopt(st, new=False)
        st.execute("UPDATE campaigns SET status = 'interrupted', pid = NULL")
        # as if a harness had died in the middle of this element, twice
        st.execute("UPDATE campaign_elements SET status = 'running', interruptions = 1")
    report = engine.run()
    assert report.resumed and report.campaign_id == cid
    [row] = report.rows
    assert row.status is ElementStatus.QUARANTINED and row.interruptions == 2


def test_stall_budget_learnt_from_history_times_out(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    c = small(tmp_path, reps=1, extra="stall_factor = 2.0\nstall_floor = 0.5\nmax_failures = 1")
    with Store.open(db) as st:
        st.execute(
            "INSERT INTO runs (id, scenario, kind, params, started_at, finished_at, status)"
            " VALUES ('old', 'ext2-fsync', 'crash', '{}', '2024-01-01T00:00:00.000+00:00',"
            " '2024-01-01T00:00:00.100+00:00', 'done')"
        )
        h = campaign.history(st, "ext2-fsync")
    assert h.expected == pytest.approx(0.1, abs=1e-3)
    assert h.stall_budget(2.0, 0.5) == 0.5

    def hang(el: Element, ctx: ElementContext) -> str:
        assert ctx.budget == 0.5
        time.sleep(30)
        return "never"

    t = time.monotonic()
    report = Engine(c, db, runner=hang).run()
    assert time.monotonic() - t < 5
    [row] = report.rows
    assert row.status is ElementStatus.QUARANTINED
    assert (row.last_error or "").startswith("timeout")


def test_a_live_campaign_is_not_run_twice(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    c = small(tmp_path, reps=1)
    with Store.open(db) as st:
        Engine(c, db)._adopt(st, new=False)
        st.execute("UPDATE campaigns SET pid = ?", (os.getppid(),))  # alive, not us
    with pytest.raises(InputError, match="is running in process"):
        Engine(c, db, runner=fake_runner).run()


CHILD = """
import sys, functools
sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
from pathlib import Path
from harness.config import campaign as config_campaign
from harness.campaign import runner as campaign
import test_campaign as t
c = config_campaign.load(Path({camp!r}))
campaign.Engine(c, Path({db!r}), runner=functools.partial(t.fake_runner, delay=0.15)).run()
"""


def kill_and_resume(tmp_path: Path, kills: int, seed: int) -> dict[str, int]:
    """Run a campaign in a child, SIGKILL it at random points ``kills`` times, resume."""
    db = tmp_path / "lab.sqlite"
    # Ten kills can land on one element five times (slow child start-ups): it would be
    # quarantined by design, which is not what this test is about (losing nothing).
    camp = write(
        tmp_path,
        'max_interruptions = 100\n[[run]]\nscenario = "ext2-fsync"\nrepetitions = 8\n',
    )
    c = config_campaign.load(camp)
    code = CHILD.format(repo=str(REPO), tests=str(REPO / "tests"), camp=str(camp), db=str(db))
    rnd = random.Random(seed)
    seen: set[tuple[str, str]] = set()
    lost = 0
    for _ in range(kills):
        child = subprocess.Popen([sys.executable, "-c", code])
        time.sleep(rnd.uniform(0.3, 1.2))
        child.send_signal(signal.SIGKILL)
        child.wait()
        if db.exists():
            with Store.open(db) as st:
                now = {
                    (str(r), str(s)) for r, s in st.execute("SELECT run_id, state_id FROM verdicts")
                }
            lost += len(seen - now)
            seen |= now
    subprocess.run([sys.executable, "-c", code], check=True)
    with Store.open(db) as st:
        verdicts = st.execute("SELECT run_id, state_id FROM verdicts")
        lost += len(seen - {(str(r), str(s)) for r, s in verdicts})
        runs_per_element = st.execute(
            "SELECT scenario, seed, count(*) FROM runs GROUP BY scenario, params, seed"
        )
        elements = st.execute("SELECT status, count(*) FROM campaign_elements GROUP BY status")
        campaigns = st.execute("SELECT count(*) FROM campaigns")[0][0]
    return {
        "lost": lost,
        "duplicated_runs": sum(n - 1 for _, _, n in runs_per_element),
        "runs": len(runs_per_element),
        "verdicts": len(verdicts),
        "expected_verdicts": len(c.elements) * STATES,
        "done": dict(elements).get("done", 0),
        "elements": len(c.elements),
        "campaigns": campaigns,
    }


def test_sigkill_at_random_points_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    r = kill_and_resume(tmp_path, kills=10, seed=5)
    assert r["lost"] == 0 and r["duplicated_runs"] == 0
    assert r["runs"] == r["elements"] and r["done"] == r["elements"]
    assert r["verdicts"] == r["expected_verdicts"] and r["campaigns"] == 1


def test_status_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from harness.cli.main import main

    db = tmp_path / "lab.sqlite"
    c = small(tmp_path, reps=2)
    Engine(c, db, runner=fake_runner).run()
    capsys.readouterr()
    assert main(["campaign", "status", str(c.path), "--db", str(db), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [e["status"] for e in got["elements"]] == ["done", "done"]
    assert all(e["scenario"] == "ext2-fsync" and e["run"] for e in got["elements"])
    assert got["campaign"] == c.name
