"""One account of every outcome: a finding in any experiment kind's run makes the campaign
that holds it exit 1, and what a kind's rule expects never does.

Before the account, ``scenario campaign run`` counted the ``verdicts`` table only: a
finding stored as an observation (fsync-eio, dust-scrub, drop-remount, recovery,
workload) or a ZFS scan exited 0 with "no finding in any run" (the first parameters of
``test_a_finding_of_every_kind_fails_its_campaign`` fail on that code).

Each element here is a run of the kind's real scenario whose item is written through
the store writer that kind uses, and accounted by the lifecycle's own ``account`` with the
kind's own rule; the campaign engine and its summary are the real ones. The guests that
would have produced the item are the only thing left out (``test_fsync_eio`` and the
other vm tests run those).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.campaign.runner import ElementContext, Engine
from harness.cli import campaign as cli_campaign
from harness.config import campaign as config_campaign
from harness.config import scenario
from harness.config.base import ScenarioBase
from harness.config.campaign import Element
from harness.errors import EXIT_FINDING, EXIT_HARNESS, EXIT_OK, HarnessError
from harness.experiments import lifecycle, registry
from harness.outcome import Outcome
from harness.store import firstmigrations, schema
from harness.store.db import (
    CheckResult,
    CrashState,
    LogInfo,
    RunEnv,
    RunStatus,
    ScanKind,
    Stage,
    Store,
)


@dataclass(frozen=True)
class Item:
    """One item as a kind stores it; ``detail`` is what its rule may read."""

    outcome: Outcome
    detail: dict[str, Any]


def _write(st: Store, run_id: str, table: str, it: Item) -> None:
    """The item, through the store writer the kind itself uses."""
    if table == "verdicts":
        log = LogInfo(f"log-{run_id}", "/dev/null", 1, 0, 0, 0, 0, 0)
        st.add_log(log, run_id=run_id)
        st.record_state_result(
            run_id,
            CrashState("fua-1", log.hash, "fua", prefix=1, params=it.detail),
            [CheckResult(Stage.GUEST, "mount+oracle", it.outcome, 0.1)],
            {"mount": 0.1},
        )
    elif table == "observations":
        cell = it.detail.get("cell", {})
        st.record_observation(run_id, "cell-1", cell, {"outcome": str(it.outcome)}, it.outcome)
    else:
        st.add_zfs_scan(
            run_id,
            repetition=0,
            kind=ScanKind.SCRUB,
            layout="raidz1",
            seconds=1.0,
            extra={"item": "rep-0", "outcome": str(it.outcome), **it.detail},
        )


def _runner(table: str, it: Item) -> Any:
    def run(el: Element, ctx: ElementContext) -> str:
        sc = scenario.load(el.scenario, el.overrides)
        kind, cls = registry.experiment(sc)
        with Store.open(ctx.db) as st:
            run_id = st.begin_run(sc.name, kind.run_kind, sc.resolved(), el.seed, env=RunEnv())
            _write(st, run_id, table, it)
            exp = cls(lifecycle.Run(sc, st, ctx.db, run_id, el.seed, None, False, ctx.progress))  # type: ignore[arg-type]
            st.set_account(run_id, lifecycle.account(exp))
            st.finish_run(run_id, RunStatus.DONE)
        return run_id

    return run


def _campaign(tmp_path: Path, name: str) -> config_campaign.Campaign:
    """``name`` is a scenario, or ``scenario key=value`` for one --set."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = tmp_path / "camp.toml"
    scenario_name, _, sets = name.partition(" ")
    extra = f"set = [{sets!r}]\n" if sets else ""
    p.write_text(textwrap.dedent(f'[[run]]\nscenario = "{scenario_name}"\n{extra}'))
    return config_campaign.load(p)


def _summarize(tmp_path: Path, name: str, table: str, it: Item) -> int:
    db = tmp_path / "lab.sqlite"
    report = Engine(_campaign(tmp_path, name), db, runner=_runner(table, it)).run()
    return cli_campaign.summarize(report)


LOSS = Item(Outcome.DATA_LOSS, {})
EXT2 = "ext4-ordered-fsync fs.type=ext2"  # ext2, with no expected answer

FINDINGS = [
    ("fsync-eio", "observations", LOSS),
    ("dust-scrub", "observations", LOSS),
    ("flakey-drop-remount", "observations", LOSS),
    ("recovery-vs-size", "observations", Item(Outcome.MOUNT_FAILED, {"cell": {"fs": "ext4"}})),
    ("journal-cost", "observations", LOSS),
    ("scrub-zero-1disk", "zfs_scans", Item(Outcome.DATA_LOSS, {"expected_loss": 0})),
    ("zfs-crash-raidz1", "verdicts", Item(Outcome.DATA_LOSS, {"honest": True})),
    ("ext4-ordered-fsync", "verdicts", LOSS),
    ("ace-seq1-ci", "verdicts", LOSS),
    ("check-log-generic-482", "verdicts", LOSS),
    # ext2-fsync itself is a control now (docs/findings/ext2-nojournal-fsync-6.1.md)
    (EXT2, "verdicts", LOSS),
]


@pytest.mark.parametrize(
    ("name", "table", "it"), FINDINGS, ids=[f[0].split()[-1] for f in FINDINGS]
)
def test_a_finding_of_every_kind_fails_its_campaign(
    tmp_path: Path, name: str, table: str, it: Item
) -> None:
    assert _summarize(tmp_path, name, table, it) == EXIT_FINDING
    with Store.open(tmp_path / "lab.sqlite") as st:
        (row,) = st.runs()
        assert row.exit_status == EXIT_FINDING and row.account.findings == 1


def test_every_kind_is_covered() -> None:
    kinds = {str(scenario.load(name.split()[0]).experiment_kind) for name, _, _ in FINDINGS}
    assert kinds == set(registry.variants())


EXPECTED = [
    # ext2 has no journal: fsck repairing it is its recovery (crash replay, and recovery)
    (EXT2, "verdicts", Item(Outcome.REPAIRED, {})),
    ("ext4-ordered-fsync", "verdicts", Item(Outcome.REPAIRED, {})),  # not expected: a journal
    ("recovery-vs-size", "observations", Item(Outcome.REPAIRED, {"cell": {"fs": "ext2"}})),
    (
        "recovery-vs-size",
        "observations",
        Item(Outcome.REPAIRED, {"cell": {"fs": "ext4", "features": "^has_journal"}}),
    ),
    # two disks of a raidz1: past its parity
    ("scrub-zero-2disks", "zfs_scans", Item(Outcome.DATA_LOSS, {"expected_loss": 1})),
    # a lying disk's loss is the model's, but its hang is still the lab's
    ("zfs-crash-raidz1", "verdicts", Item(Outcome.DATA_LOSS, {"honest": False})),
    ("zfs-crash-raidz1", "verdicts", Item(Outcome.TIMEOUT, {"honest": False})),
]


@pytest.mark.parametrize(
    ("name", "table", "it", "status"),
    [(*e, s) for e, s in zip(EXPECTED, [0, 1, 0, 0, 0, 0, 3], strict=True)],
)
def test_what_a_kinds_rule_expects_is_reported_not_a_finding(
    tmp_path: Path, name: str, table: str, it: Item, status: int
) -> None:
    assert _summarize(tmp_path, name, table, it) == status
    with Store.open(tmp_path / "lab.sqlite") as st:
        (row,) = st.runs()
    expected = status != EXIT_FINDING
    assert dict(row.account.expected) == ({str(it.outcome): 1} if expected else {})
    assert row.exit_status == status


def test_a_control_that_finds_what_it_must_passes_its_campaign(tmp_path: Path) -> None:
    # ext4-nobarrier expects findings: its data_loss is the answer, not a page
    assert _summarize(tmp_path, "ext4-nobarrier", "verdicts", LOSS) == EXIT_OK
    clean = Item(Outcome.CONSISTENT, {})
    assert _summarize(tmp_path / "b", "ext4-nobarrier", "verdicts", clean) == EXIT_FINDING


def test_a_loss_the_configuration_waived_is_expected_with_the_option_named(
    tmp_path: Path,
) -> None:
    # Issue 46: barrier=0 gives up ordered commits on a volatile cache; a loss there is
    # what the option says may happen, never a finding (nor a mail: test_triage_waived).
    waived = "ext4-ordered-fsync fs.mount_options=['noatime','barrier=0']"
    assert _summarize(tmp_path, waived, "verdicts", LOSS) == EXIT_OK
    with Store.open(tmp_path / "lab.sqlite") as st:
        (row,) = st.runs()
    assert row.account.findings == 0 and dict(row.account.expected) == {"data_loss": 1}
    assert dict(row.account.waived) == {"fua-1": "barrier=0"}  # read back from the store
    # A harness outcome is the lab's, whatever the configuration waived.
    hang = Item(Outcome.TIMEOUT, {})
    assert _summarize(tmp_path / "h", waived, "verdicts", hang) == EXIT_HARNESS
    # xfs has no such option (mkfs-time: nobarrier is refused since 4.19): a finding.
    xfs = "xfs-fsync fs.mount_options=['noatime']"
    assert _summarize(tmp_path / "x", xfs, "verdicts", LOSS) == EXIT_FINDING


def test_the_barrier_control_is_answered_by_the_waived_loss(tmp_path: Path) -> None:
    assert _summarize(tmp_path, "ext4-nobarrier", "verdicts", LOSS) == EXIT_OK
    with Store.open(tmp_path / "lab.sqlite") as st:
        (row,) = st.runs()
    assert row.account.control_failed is None and row.account.waived


def test_a_store_of_the_previous_schema_is_migrated_with_its_counts(tmp_path: Path) -> None:
    """Runs stored before the account keep their outcomes: counted from their items,
    nothing marked expected, no exit status; reports fall back to the counts."""
    db = tmp_path / "old.sqlite"
    with Store.open(db) as st:
        run_id = st.begin_run("fsync-eio", "faults", {}, 1)
        _write(st, run_id, "observations", LOSS)
        st.finish_run(run_id, RunStatus.DONE)
        # back to schema 5: what a store written by the previous crashlab holds
        (old_v_runs,) = (s for s in firstmigrations._MIGRATION_2 if "CREATE VIEW v_runs" in s)
        (old_v_states,) = (s for s in firstmigrations._MIGRATION_2 if "CREATE VIEW v_states" in s)
        for stmt in (
            # migrations 11 (the phases no item row holds) and 10 (the promise a finding
            # broke), then 9 (the stored classification) undone first
            "DROP TABLE run_phases",
            *(f"ALTER TABLE verdicts DROP COLUMN {c}" for c in ("profile", "promise", "rule")),
            "DROP VIEW v_states",
            old_v_states,
            "DROP VIEW v_runs",
            "DROP VIEW v_run_outcomes",
            "DROP TABLE expected_items",
            "DROP TABLE outcome_classes",
            # migration 8 (recovery crash parents), then 7 (state identities) undone first
            "ALTER TABLE crash_states DROP COLUMN parent",
            "DROP INDEX crash_states_identity",
            *(
                f"ALTER TABLE crash_states DROP COLUMN {c}"
                for c in ("identity", "check_key", "reused_from")
            ),
            "DROP VIEW v_item_outcomes",
            "DROP TABLE run_outcomes",
            "ALTER TABLE runs DROP COLUMN exit_status",
            "ALTER TABLE runs DROP COLUMN expect",
            old_v_runs,
            "PRAGMA user_version = 5",
        ):
            st.execute(stmt)

    with Store.open(db) as st:
        assert st.execute("PRAGMA user_version")[0][0] == schema.SCHEMA_VERSION
        row = st.run(run_id)
        assert row.exit_status is None and dict(row.outcome_counts) == {"data_loss": 1}
        assert st.execute("SELECT findings FROM v_runs")[0][0] == 1
        assert row.account.status == EXIT_FINDING


class _FailsAfter(lifecycle.Observed):
    """A kind whose first item is judged, then the lab breaks (a guest that hangs)."""

    def prepare(self) -> None:
        self.outcome = Outcome(self.sc.first)

    def items(self) -> list[Any]:
        return [SimpleNamespace(id="a"), SimpleNamespace(id="b")]

    def check(self, todo: Any) -> Iterator[tuple[Any, Any]]:
        yield todo[0], self.outcome
        raise HarnessError("the guest stopped answering")

    def commit(self, item: Any, result: Any) -> None:
        self.run.store.record_observation(self.run.run_id, item.id, {}, {}, result)


@pytest.mark.parametrize(("first", "want"), [("data_loss", 1), ("consistent", 3)])
def test_a_run_that_fails_after_a_finding_stays_a_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str, want: int
) -> None:
    fails = registry.Kind(
        "fails", ScenarioBase, "faults", {"fails-after": registry.Variant(_FailsAfter, print)}
    )
    monkeypatch.setitem(registry.kinds(), "fails", fails)
    monkeypatch.setattr(lifecycle, "require_image", lambda: SimpleNamespace(hash="img"))
    monkeypatch.setattr(lifecycle, "run_env", lambda img, **_: RunEnv(image_hash=img.hash))
    sc = SimpleNamespace(
        name="fails",
        path=tmp_path / "fails.toml",
        kind="fails",
        experiment_kind="fails-after",
        seed=1,
        first=first,
        expect=None,
        resolved=lambda: {"first": first},
    )
    db = tmp_path / "lab.sqlite"
    with pytest.raises(HarnessError):
        lifecycle.execute(sc, db=db)
    with Store.open(db) as st:
        (row,) = st.runs()
    assert row.status is RunStatus.FAILED and row.exit_status == want
    assert dict(row.outcome_counts) == {first: 1}


def test_an_item_the_lab_failed_is_redone_by_a_resume_and_a_finding_is_kept(
    tmp_path: Path,
) -> None:
    """A killed guest agent left a recovery item `timeout` in a run marked done, and running
    the command again started over (chaos cycle 14). Now an item with a harness outcome is
    not done: a resume checks it again, for a crash state and for an observation alike,
    while a finding stays done and is never redone."""
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        sc = scenario.load("recovery-vs-size")
        kind, cls = registry.experiment(sc)
        run_id = st.begin_run(sc.name, kind.run_kind, sc.resolved(), 1, env=RunEnv())
        exp = cls(lifecycle.Run(sc, st, db, run_id, 1, None, False, None))  # type: ignore[arg-type]
        st.record_observation(run_id, "a", {}, {}, Outcome.TIMEOUT)
        st.record_observation(run_id, "b", {}, {}, Outcome.MOUNT_FAILED)
        assert exp.done() == {"b"} and exp.retries_harness_items
        st.record_observation(run_id, "a", {}, {}, Outcome.CONSISTENT)
        assert exp.done() == {"a", "b"} and len(st.observations(run_id)) == 2

        log = LogInfo("log-x", "/dev/null", 1, 0, 0, 0, 0, 0)
        st.add_log(log, run_id=run_id)
        states = [CrashState(f"fua-{i}", log.hash, "fua", prefix=i) for i in (1, 2)]
        for s, o in zip(states, (Outcome.HARNESS_ERROR, Outcome.DATA_LOSS), strict=True):
            st.record_state_result(run_id, s, [CheckResult(Stage.HOST, "e2fsck", o, 0.1)], {})
        assert st.done_state_ids(run_id) == {"fua-2"}
        # The redo's later harness failure cannot hide the finding of another state.
        timeout = [CheckResult(Stage.HOST, "e2fsck", Outcome.TIMEOUT, 0.1)]
        assert st.record_state_result(run_id, states[1], timeout, {}) is Outcome.DATA_LOSS


def test_views_read_the_stored_classification(tmp_path: Path) -> None:
    """ext2's repaired state is expected: ``v_states`` says so, the dashboard's findings
    query (``counts_as = 'finding'``) leaves it out, and ``v_runs`` counts no finding."""
    assert _summarize(tmp_path, EXT2, "verdicts", Item(Outcome.REPAIRED, {})) == EXIT_OK
    with Store.open(tmp_path / "lab.sqlite") as st:
        (row,) = st.execute("SELECT state_id, expected, counts_as FROM v_states")
        assert row == ("fua-1", 1, "expected")
        assert st.execute("SELECT findings, expected_outcomes FROM v_runs") == [(0, 1)]
        (run,) = st.runs()
        assert st.account(run.id)[0].expected_items == {"fua-1"}
    assert _summarize(tmp_path / "b", EXT2, "verdicts", LOSS) == EXIT_FINDING
    with Store.open(tmp_path / "b" / "lab.sqlite") as st:
        assert st.execute("SELECT counts_as FROM v_states") == [("finding",)]
        assert st.execute("SELECT findings FROM v_runs") == [(1,)]
