"""Every distinct crash state is checked once (issue 23 item 3): the check key, the
store's lookup across runs, and ``check_sources`` passing a verdict to a twin instead
of checking it -- host checks only, on the recorded ext4 log, no guest."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import tools
from harness.check import host as check
from harness.config import scenario
from harness.crashstate import checking as states
from harness.crashstate import onelog, reuse
from harness.experiments import lifecycle
from harness.outcome import Outcome
from harness.record.logwrites import open_log
from harness.replay.crashstates import CrashState, generate
from harness.store.db import CheckResult, LogInfo, Stage, Store
from harness.store.db import CrashState as StoredState

ORACLE = Path(__file__).parent / "data" / "logs" / "ext4-ops-small.oracle.json"


@pytest.fixture()
def sc() -> Any:
    return scenario.load("ext4-ordered-fsync", ["check.guest=false"])


@pytest.fixture()
def source(ext4_small: tuple[Path, dict[str, Any]]) -> Iterator[states.Source]:
    """The fua + mark states of the recorded log, judged without an oracle (as a fio
    workload is): their check key is the same for all, so twins are the same image."""
    log_path, meta = ext4_small
    with open_log(log_path) as log:
        states_ = generate(log, [{"kind": "fua"}, {"kind": "mark"}])
        yield states.Source(log, states_, {}, meta["device_size"])


@pytest.fixture()
def oracle() -> dict[str, Any]:
    return dict(json.loads(ORACLE.read_text()))


class Checks:
    """Counts the states ``check_sources`` hands to the host checker."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: set[str] | None = None) -> None:
        self.states: list[str] = []
        fail = fail or set()
        real = states._host_checks

        def spy(sc: Any, fs: Any, src: Any, todo: list[CrashState], fast: Path) -> Any:
            self.states += [s.id for s in todo]
            for state, result in real(sc, fs, src, todo, fast):
                if state.id in fail:  # the lab failed on it, once
                    fail.discard(state.id)
                    result = check.CheckResult("host", "e2fsck", Outcome.HARNESS_ERROR, None, 0)
                yield state, result

        monkeypatch.setattr(states, "_host_checks", spy)


def run_sources(
    sc: Any, src: states.Source, tmp_path: Path, r: reuse.Reuse | None
) -> list[states.Checked]:
    return list(states.check_sources(sc, sc.fs, [src], tmp_path, lifecycle.no_progress, r))


def needs_e2fsck() -> None:
    if not tools.available("e2fsck") or not tools.available("e2undo"):
        pytest.skip("e2fsprogs not installed")


def test_a_twin_takes_its_verdict_instead_of_a_check(
    sc: Any, source: states.Source, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_e2fsck()
    checks = Checks(monkeypatch)
    out = run_sources(sc, source, tmp_path, reuse.Reuse("ctx", "run1"))
    assert sorted(c.state.id for c in out) == sorted(s.id for s in source.states)
    pairs = Counter((c.check_key, c.identity) for c in out)
    reused = [c for c in out if c.reused_from]
    # 28 states, 19 distinct images (issue 23's count): 19 checks, each run once
    assert (len(out), len({c.identity for c in out}), len(pairs)) == (28, 19, 19)
    assert len(checks.states) == len(set(checks.states)) == 19
    assert len(reused) == 9
    by_ref = {f"run1/{c.state.id}": c for c in out if not c.reused_from}
    for c in reused:
        twin = by_ref[c.reused_from or ""]
        assert (twin.identity, twin.check_key) == (c.identity, c.check_key)
        assert c.state.id not in checks.states
        assert [r.outcome for r in c.results] == [r.outcome for r in twin.results]
        assert all(r.checker == "reused" and c.reused_from in r.output for r in c.results)
    assert all(r.outcome is Outcome.CONSISTENT for c in out for r in c.results)


def test_the_same_image_expected_to_hold_more_is_checked_again(
    sc: Any,
    source: states.Source,
    oracle: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the workload's oracle, the state cut exactly at a sync mark expects what the
    sync made durable, while the FUA state just before it, byte for byte the same image,
    expects less: 8 of the 9 twins are other checks, and only the two FUA states of one
    interval (178, 179) share one: 27 checks. (Umount and the log's end expect the same
    of their common image too, but the fixture's oracle predates the exact rule, which
    ``requirements`` needs, so exact states are keyed by the whole oracle and their
    mark's name -- a key too fine, never too coarse.)"""
    needs_e2fsck()
    checks = Checks(monkeypatch)
    src = states.Source(source.log, source.states, oracle, source.size)
    out = run_sources(sc, src, tmp_path, reuse.Reuse("ctx", "run1"))
    assert len(out) == 28 and len(checks.states) == 27
    (twin,) = [c for c in out if c.reused_from]
    assert twin.state.prefix == 179 and twin.reused_from.endswith(  # type: ignore[union-attr]
        next(c.state.id for c in out if c.state.prefix == 178)
    )


def test_without_reuse_every_state_is_checked(
    sc: Any, source: states.Source, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_e2fsck()
    checks = Checks(monkeypatch)
    out = run_sources(sc, source, tmp_path, None)
    assert len(checks.states) == len(out) == 28 and not any(c.reused_from for c in out)


def test_a_harness_outcome_is_never_passed_on(
    sc: Any, source: states.Source, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_e2fsck()
    first = run_sources(sc, source, tmp_path, reuse.Reuse("ctx", "run1"))
    twin = next(c for c in first if c.reused_from)
    original = twin.reused_from.split("/")[1]  # type: ignore[union-attr]
    checks = Checks(monkeypatch, fail={original})
    out = {c.state.id: c for c in run_sources(sc, source, tmp_path, reuse.Reuse("ctx", "run1"))}
    assert out[original].results[0].outcome is Outcome.HARNESS_ERROR
    # the twin was checked itself, after its original failed, and earned a verdict
    assert checks.states.count(twin.state.id) == 1 and checks.states[-1] == twin.state.id
    assert out[twin.state.id].reused_from is None
    assert out[twin.state.id].results[0].outcome is Outcome.CONSISTENT


def test_a_second_run_reuses_every_verdict_from_the_store(
    sc: Any, source: states.Source, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_e2fsck()
    with Store.open(tmp_path / "lab.sqlite") as st:
        runs = []
        for n in range(2):
            run_id = st.begin_run("s", "crash", {}, n)
            st.add_log(LogInfo(source.log.hash, "log", 1, 0, 0, 0, 0, 0), run_id=run_id)
            runs.append(run_id)
            checks = Checks(monkeypatch)
            for c in run_sources(sc, source, tmp_path, reuse.Reuse("ctx", run_id, st.judged)):
                onelog.commit_state(st, run_id, c)
                assert len(checks.states) == (19 if n == 0 else 0)
        assert st.reuse_counts(runs[0]) == {
            "generated": 28,
            "distinct": 19,
            "checked": 19,
            "reused": 9,
        }
        assert st.reuse_counts(runs[1])["reused"] == 28
        # every reused row names a state of the first run that was checked
        refs = st.execute(
            "SELECT DISTINCT reused_from FROM crash_states WHERE run_id = ?", (runs[1],)
        )
        checked = {
            f"{runs[0]}/{sid}"
            for (sid,) in st.execute(
                "SELECT id FROM crash_states WHERE run_id = ? AND reused_from IS NULL",
                (runs[0],),
            )
        }
        assert {r for (r,) in refs} == checked


def _store_state(sid: str, identity: str, key: str, reused_from: str | None = None) -> StoredState:
    return StoredState(
        sid, "L", "fua", 3, identity=identity, check_key=key, reused_from=reused_from
    )


def test_judged_looks_across_runs_and_skips_the_labs_failures(tmp_path: Path) -> None:
    with Store.open(tmp_path / "lab.sqlite") as st:
        a, b = st.begin_run("s", "crash", {}, 1), st.begin_run("s", "crash", {}, 2)
        st.add_log(LogInfo("L", "log", 1, 0, 0, 0, 0, 0), run_id=a)

        def record(run: str, s: StoredState, o: Outcome) -> None:
            st.record_state_result(run, s, [CheckResult(Stage.GUEST, "mount", o, 1.0, 0, "x")], {})

        record(a, _store_state("t", "I", "K"), Outcome.TIMEOUT)
        assert st.judged("K", "I") is None  # a hang says nothing about the image
        record(a, _store_state("d", "I", "K"), Outcome.DATA_LOSS)
        record(b, _store_state("e", "I", "K", reused_from=f"{a}/d"), Outcome.DATA_LOSS)
        found = st.judged("K", "I")
        assert found is not None and (found.ref, found.verdict) == (f"{a}/d", Outcome.DATA_LOSS)
        assert [c.checker for c in found.checks] == ["mount"]
        assert st.judged("K2", "I") is None and st.judged("K", "J") is None


def test_other_expectations_are_another_check(
    source: states.Source, oracle: dict[str, Any]
) -> None:
    ctx = "ctx"
    by_mark: dict[tuple[str | None, bool], str] = {}
    for s in source.states:
        key = reuse.check_key(ctx, oracle, s, source.size)
        assert by_mark.setdefault((s.mark, s.exact), key) == key  # one requirement, one key
    # the FUA state before sync 2's mark and the state cut at it: one image, two
    # requirements (durable after sync 1 / exactly what sync 2 made durable), two keys
    fua, mark = (next(s for s in source.states if s.prefix == p) for p in (114, 115))
    assert (fua.mark, fua.exact, mark.mark, mark.exact) == (
        "crashlab:sync:1",
        False,
        "crashlab:sync:2",
        True,
    )
    assert by_mark[(fua.mark, False)] != by_mark[(mark.mark, True)]
    assert len(set(by_mark.values())) > 10
    s = source.states[-1]
    base = reuse.check_key(ctx, oracle, s, source.size)
    assert reuse.check_key("other", oracle, s, source.size) != base
    assert reuse.check_key(ctx, oracle, s, source.size * 2) != base
    assert reuse.check_key(ctx, {}, s, source.size) != base


def test_the_context_holds_what_a_verdict_depends_on(sc: Any) -> None:
    def key(sc: Any, kernel: str = "6.1.0-56-amd64", **tools: str) -> str:
        tv = {"kernel": "the image's (abc)", "e2fsprogs": "1.47.0", "host": "6.1", **tools}
        return reuse.context_key(sc.check, sc.crash, sc.fs, kernel, tv)

    base = key(sc)
    assert key(sc, host="6.9") == base  # the host's kernel never sees a crash image
    others = [key(sc, "6.12.0"), key(sc, kernel="mutant x"), key(sc, e2fsprogs="1.47.1")]
    for sets in (
        ['fs.mount_options=["nodelalloc"]'],
        ["check.guest=true"],
        ["fs.data_mode=journal"],
        ["crash.corrupt=zero-durable-block", "expect=findings"],
    ):
        others.append(key(scenario.load("ext4-ordered-fsync", ["check.guest=false", *sets])))
    assert len({base, *others}) == len(others) + 1
