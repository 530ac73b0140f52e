"""Issue 9: verdicts are never lost or replaced by the lab's own failures, timeouts are
honoured, and a resumed run never mixes two guest images. Each test here fails on the
code before the fix (noted per test)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.check import guest as guestcheck
from harness.check import host
from harness.errors import GuestAgentError, HarnessError
from harness.experiments import lifecycle
from harness.experiments.crash.experiment import CrashReplay
from harness.model.contract import CheckFacts
from harness.outcome import Outcome, Tallied, tally
from harness.proc import run
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
from tests import guestfacts

LOG = LogInfo("abc", "/tmp/w.log", 10, 1, 1, 1, 0, 4096)


def _state(sid: str) -> CrashState:
    return CrashState(sid, LOG.hash, "fua", prefix=3, last_mark="m", description="")


def _verdict(st: Store, run_id: str, sid: str) -> str:
    return str(st.execute("SELECT outcome FROM verdicts WHERE state_id = ?", (sid,))[0][0])


def test_a_harness_outcome_never_replaces_a_finding(tmp_path: Path) -> None:
    # Before: record_state_result deleted and re-inserted, so data_loss became harness_error.
    with Store.open(tmp_path / "lab.sqlite") as st:
        run_id = st.begin_run("s", RunKind.CRASH, {}, 1)
        st.add_log(LOG, run_id=run_id)

        def record(sid: str, o: Outcome) -> Outcome:
            return st.record_state_result(
                run_id, _state(sid), [CheckResult(Stage.GUEST, "mount", o, 0.1)], {}, o
            )

        record("a", Outcome.DATA_LOSS)
        assert record("a", Outcome.HARNESS_ERROR) is Outcome.DATA_LOSS
        assert _verdict(st, run_id, "a") == "data_loss"
        assert st.execute("SELECT outcome FROM checks WHERE state_id = 'a'") == [("data_loss",)]
        record("b", Outcome.CONSISTENT)
        record("b", Outcome.TIMEOUT)
        assert _verdict(st, run_id, "b") == "consistent"
        # the other way round is a resume doing its job
        record("c", Outcome.PANIC)
        record("c", Outcome.REPAIRED)
        assert _verdict(st, run_id, "c") == "repaired"


def test_a_guest_failing_mid_batch_keeps_the_judged_states(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Before: every state of the batch, judged ones included, came out again as
    # harness_error when the agent channel failed on the third.
    boots: list[int] = []

    @contextlib.contextmanager
    def fake_guest(spec: Any) -> Iterator[Any]:
        boots.append(len(spec.disks))
        yield SimpleNamespace()

    def fake_check(guest: Any, serial: str, it: guestcheck.Item, *args: Any) -> Any:
        if it.key == "s2":
            raise GuestAgentError("the guest agent channel broke")
        return [host.CheckResult("guest", "mount+verify", Outcome.DATA_LOSS, 0, 0.1)]

    monkeypatch.setattr(guestcheck, "start_guest", fake_guest)
    monkeypatch.setattr(guestcheck, "_prepare", lambda guest, oracle: None)
    monkeypatch.setattr(guestcheck, "_check_one", fake_check)
    items = [guestcheck.Item(f"s{i}", tmp_path / f"s{i}.img", None) for i in range(4)]
    fs: Any = SimpleNamespace(type="ext4")
    got = list(guestcheck.check_batch(items, fs, {}, timeout=5))
    assert [k for k, _ in got] == ["s0", "s1", "s2", "s3"]  # each state exactly once
    assert [r.outcome for _, (r,) in got] == [
        Outcome.DATA_LOSS,
        Outcome.DATA_LOSS,
        Outcome.HARNESS_ERROR,
        Outcome.HARNESS_ERROR,
    ]
    assert boots == [4, 2]  # the rest were tried again in a fresh guest first


@pytest.fixture
def ext4_image(tmp_path: Path) -> Path:
    img = tmp_path / "fs.img"
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    run(["mkfs.ext4", "-q", "-F", img])
    return img


def test_host_checks_honour_a_timeout(ext4_image: Path, tmp_path: Path) -> None:
    # Before: host checks had no timeout at all.
    before = ext4_image.read_bytes()
    r = host.host_check("ext4", ext4_image, tmp_path / "scratch", timeout=0.0005)
    assert r.outcome is Outcome.TIMEOUT, r.output
    assert ext4_image.read_bytes() == before
    assert host.host_check("ext4", ext4_image, tmp_path / "s2", timeout=60).outcome is (
        Outcome.CONSISTENT
    )


def test_an_image_e2fsck_cannot_open_is_a_harness_error(tmp_path: Path) -> None:
    # Before: e2fsck's exit 8 on an image it could not open was `unrepairable`, a finding.
    r = host.host_check("ext4", tmp_path / "no-such.img", tmp_path / "scratch")
    assert r.outcome is Outcome.HARNESS_ERROR


def test_a_destroyed_superblock_stays_a_finding(ext4_image: Path, tmp_path: Path) -> None:
    with open(ext4_image, "r+b") as f:  # primary and first backup superblocks zeroed
        f.seek(1024)
        f.write(bytes(1024))
    r = host.host_check("ext4", ext4_image, tmp_path / "scratch")
    assert r.outcome in (Outcome.REPAIRED, Outcome.UNREPAIRABLE), r.output


def _scenario(expect: str | None = None) -> Any:
    return SimpleNamespace(name="ext4-x", seed=1, expect=expect, experiment_kind="crash")


def test_resume_never_mixes_guest_images(tmp_path: Path) -> None:
    # Before: an unfinished run was resumed whatever image (and kernel) it was begun with.
    params = {"name": "ext4-x"}
    with Store.open(tmp_path / "lab.sqlite") as st:
        old = st.begin_run("ext4-x", RunKind.CRASH, params, 1)
        st.execute("UPDATE runs SET image_hash = 'old' WHERE id = ?", (old,))
        st.finish_run(old, RunStatus.INTERRUPTED)

        def begin(image_hash: str, fresh: bool = False) -> tuple[str, bool, str | None]:
            env = RunEnv(image_hash=image_hash)
            return lifecycle._begin(st, _scenario(), CrashReplay, params, 1, env, (fresh, None))

        run_id, resumed, why = begin("new")
        assert run_id != old and not resumed and why is not None and "old" in why
        assert st.run(run_id).image_hash == "new"
        st.finish_run(run_id, RunStatus.INTERRUPTED)
        again, resumed, _ = begin("new")
        assert again == run_id and resumed
        st.finish_run(again, RunStatus.FAILED)
        fresh, resumed, _ = begin("new", fresh=True)  # scenario run --fresh
        assert fresh not in (old, run_id) and not resumed


@pytest.mark.parametrize(
    ("expect", "counts", "status", "failed"),
    [
        ("findings", {"data_loss": 3, "consistent": 5}, 1, None),
        ("findings", {"consistent": 8}, 0, "control failed: expected findings, got none"),
        ("clean", {"consistent": 8}, 0, None),
        ("clean", {"consistent": 7, "repaired": 1}, 1, "expected clean, got 1 finding(s)"),
        ("findings", {"harness_error": 8}, 3, None),  # the lab failed: no answer at all
    ],
)
def test_a_control_is_judged_by_what_it_expects(
    expect: str, counts: dict[str, int], status: int, failed: str | None
) -> None:
    items = [Tallied(f"{o}-{k}", Outcome(o)) for o, n in counts.items() for k in range(n)]
    account = tally(items, expect)
    got = account.control_failed
    assert (got is None) == (failed is None)
    if failed is not None:
        assert got is not None and failed in got
    # a control that gave its answer exits 0; a wrong answer 1; no answer at all 3
    assert account.status == (1 if failed else 3 if status == 3 else 0)


def test_expected_data_loss_follows_each_cells_parity() -> None:
    # Before: computed from the least redundant cell of the sweep, so raidz2/raidz3 losing
    # data to a two-disk fault was called "expected" and the run exited 0.
    from harness import paths
    from harness.config import scenario
    from harness.experiments.zfs.scan import expected_loss

    sc = scenario.load(
        paths.REPO / "scenarios" / "resilver-sweep.toml",
        ("fault.disks=[0,1]", "sweep.fill=[50]", "disks=5"),
    )
    by_layout = {str(c.pool.layout): expected_loss(sc, c) for c in sc.cells()}
    assert by_layout == {"mirror": False, "raidz1": True, "raidz2": False, "raidz3": False}


def test_stored_params_do_not_name_the_checkout(tmp_path: Path) -> None:
    # Before: params held the absolute scenario path, so a moved checkout never resumed.
    from harness import paths
    from harness.config import scenario

    crash = scenario.load("ext4-ordered-fsync", ())
    zfs = scenario.load("resilver-75pct", ())
    assert crash.resolved()["path"] == "scenarios/ext4-ordered-fsync.toml"
    assert zfs.resolved()["path"] == "scenarios/resilver-75pct.toml"
    outside = tmp_path / "mine.toml"
    assert paths.portable(outside) == str(outside)


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        (("fs.type=ext2",), False),
        (("fs.mkfs_options=-O,^has_journal",), False),
        ((), True),
        (("fs.type=xfs", "disk_size=512M"), True),
    ],
)
def test_fsync_names_follows_the_filesystem(overrides: tuple[str, ...], names: bool) -> None:
    # Before: true whatever the filesystem, so ext2 (or ext4 without a journal) reported
    # false data_loss for names POSIX never promised.
    from harness.config import scenario

    sc = scenario.load("ext4-ordered-fsync", overrides)
    assert sc.workload.fsync_names is names  # type: ignore[union-attr]


def test_asking_ext2_for_durable_names_is_bad_input_unless_findings_are_expected() -> None:
    from harness.config import scenario
    from harness.errors import InputError

    with pytest.raises(InputError, match=r"workload\.fsync_names") as e:
        scenario.load("ext4-ordered-fsync", ("fs.type=ext2", "workload.fsync_names=true"))
    assert "expect = 'findings'" in (e.value.hint or "")
    sc = scenario.load(
        "ext4-ordered-fsync", ("fs.type=ext2", "workload.fsync_names=true", "expect=findings")
    )
    assert sc.expect == "findings"


_facts = guestfacts.facts


@pytest.mark.parametrize(
    ("facts", "outcome"),
    [
        # Before: every mount failure was mount_failed, even a guest without the driver.
        (
            _facts(mount={"rc": 32, "seconds": 0.1, "output": "unknown filesystem type 'xfs'"}),
            Outcome.HARNESS_ERROR,
        ),
        (_facts(mount={"rc": 1, "seconds": 0.1, "output": "only root"}), Outcome.HARNESS_ERROR),
        (
            _facts(mount={"rc": 32, "seconds": 0.1, "output": "Structure needs cleaning"}),
            Outcome.MOUNT_FAILED,
        ),
        # Before: umount's exit status was ignored.
        (
            _facts(umount={"rc": 32, "seconds": 0.1, "output": "target is busy"}),
            Outcome.HARNESS_ERROR,
        ),
        # Before: any exception in the verifier was data_loss.
        (_facts(verify_error="KeyError: 'marks'"), Outcome.HARNESS_ERROR),
        # ... but a finding already shown is kept whatever the lab does next.
        (
            _facts(
                verify={"ok": False, "missing": ["a"]},
                umount={"rc": 32, "seconds": 0.1, "output": "busy"},
            ),
            Outcome.DATA_LOSS,
        ),
        (_facts(verify={"ok": True}), Outcome.CONSISTENT),
    ],
)
def test_guest_facts_are_judged_without_blaming_the_filesystem_for_the_lab(
    facts: CheckFacts, outcome: Outcome
) -> None:
    assert guestcheck.judge(facts).outcome is outcome


def test_a_crashlab_bug_exits_3_not_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: an uncaught exception exited 1, README's "a filesystem finding".
    from harness.cli import lab, main

    def boom(args: Any) -> int:
        raise KeyError("a bug of ours")

    monkeypatch.setattr(lab, "cmd_list", boom)
    assert main.main(["list"]) == 3
    err = capsys.readouterr().err
    assert "crashlab bug" in err and "Traceback" not in err


def test_a_guest_that_does_not_start_says_why_in_every_items_output() -> None:
    """Session 15: 40 states read `harness_error` with only the tail of QEMU's command
    line as their output -- the message saying why the guest did not start had been cut
    off the front. The message is kept whole now, the detail's end after it."""
    argv = " ".join(f"-drive if=none,id=d{i},file=/w/batch/{i}.img" for i in range(200))

    @contextlib.contextmanager
    def start(items: Any) -> Iterator[Any]:
        raise HarnessError(
            "the guest did not boot: QEMU exited 1", detail=argv + "\n--- console ---"
        )
        yield  # pragma: no cover

    def failed(item: str, outcome: Outcome, text: str) -> tuple[Outcome, str]:
        return outcome, text

    got = list(guestcheck.in_guests(["a", "b"], start, lambda g, i, it: None, failed))
    assert [it for it, _ in got] == ["a", "b"]
    for _, (outcome, text) in got:
        assert outcome is Outcome.HARNESS_ERROR and len(text) <= 1501
        assert text.startswith("the guest did not boot: QEMU exited 1\n")
        assert text.endswith("--- console ---")
