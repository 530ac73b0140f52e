"""``scenario check-log`` on a log fstests recorded itself: ``./check generic/482`` run
unchanged in a lab guest (tests/data/logs/README.md, fstests-generic-482, made by
bench/fstests_482.py). Its marks are fstests' own (``mkfs`` twice, no ``crashlab:``
names), its device a 200 MiB dm-thin volume. Host only (check.guest=false): the guest run
of the same log is measured in docs/search.md."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness import tools
from harness.cli import checklog
from harness.cli.main import build_parser, main
from harness.experiments import lifecycle
from harness.experiments.checklog import source
from harness.record.logwrites import open_log
from harness.store.db import Store
from tests.conftest import real_log

FSTESTS = ["--fs", "ext4", "--device-size", "200M", "--after-mark", "mkfs"]


@pytest.fixture(scope="module")
def fstests(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return real_log("fstests-generic-482", tmp_path_factory)


@pytest.fixture()
def host_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run without a guest: the host's e2fsck judges, no guest image is needed."""
    if not tools.available("e2fsck"):
        pytest.skip("e2fsprogs not installed")
    monkeypatch.setenv("CRASHLAB_WORK", str(tmp_path / "work"))
    img = SimpleNamespace(hash="img", manifest={})
    monkeypatch.setattr(lifecycle, "require_image", lambda: img)


def test_the_log_is_the_one_fstests_left(fstests: tuple[Path, dict[str, Any]]) -> None:
    path, meta = fstests
    with open_log(path) as lg:
        s = lg.stats()
        assert lg.hash == meta["log_sha256"] and lg.sectorsize == 512
        assert (s.entries, s.fuas, s.flushes, s.discards) == (
            meta["entries"],
            meta["fuas"],
            meta["flushes"],
            meta["discards"],
        )
        # _log_writes_mkfs marks `mkfs` and generic/482 marks it again: the states start
        # after the first, as fstests' `replay-log --find --end-mark mkfs` finds it.
        mkfs = [i for i, m in lg.marks.items() if m == "mkfs"]
        assert len(mkfs) == 2 and mkfs[0] == meta["mkfs_entry"]
        assert not any(m.startswith("crashlab:") for m in lg.marks.values())
        assert source.resolve_start(lg, "mkfs", None).entry == mkfs[0]
        # Every write lands on the thin volume generic/482 recorded.
        source.require_fits(lg, meta["device_size"])


def test_every_fua_after_mkfs_is_a_consistent_state(
    fstests: tuple[Path, dict[str, Any]], tmp_path: Path, host_only: None
) -> None:
    path, meta = fstests
    argv = ["check-log", str(path), *FSTESTS, "--host-only", "--max-states", "100000"]
    sc = checklog.build(build_parser().parse_args(argv))
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    # generic/482 passed on this log (fsck after every FUA): so does the lab, state for
    # state, one per FUA after fstests' mark.
    n = meta["fuas_after_mkfs"]
    assert r.status == 0 and r.items == n and dict(r.counts) == {"consistent": n}
    assert f"after mark 'mkfs' (entry {meta['mkfs_entry']})" in r.summary["start"]
    assert "spread_from" not in r.summary  # every state cut was checked
    with Store.open(db, create=False) as st:
        states = st.run_detail(r.run_id).states
    # The same cuts as fstests' own loop: its `replay-log --limit N+1` for every FUA N it
    # found (`=== replay to N ===` in 482.full) is the lab's state of prefix N+1.
    assert sorted(s.prefix - 1 for s in states) == meta["fstests"]["replayed_to"]
    # Judged by the host's e2fsck only; a state whose image equals an earlier one's takes
    # that verdict (`reused`) instead of a second fsck.
    checkers = [c.checker for s in states for c in s.checks if c.stage == "host"]
    assert len(checkers) == n and set(checkers) <= {"e2fsck", "reused"}
    assert checkers.count("e2fsck") == r.summary["reuse"]["checked"] > n // 2


def test_a_device_smaller_than_the_thin_volume_is_bad_input(
    fstests: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = fstests[0]
    db = str(tmp_path / "lab.sqlite")
    argv = ["check-log", str(path), "--fs", "ext4", "--device-size", "100M", "--db", db]
    assert main([*argv, "--after-mark", "mkfs", "--host-only"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "past the end of a 100M" in err and "Traceback" not in err
    assert not Path(db).exists()


def test_a_run_capped_by_max_states_says_how_many_it_spread_over(
    fstests: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    host_only: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """check-log's default (crash.max_states 40) checks 40 of this log's 66 FUA states;
    generic/482 checks all 66, so the run must not read as if it did too."""
    path, meta = fstests
    db = str(tmp_path / "lab.sqlite")
    assert main(["check-log", str(path), *FSTESTS, "--host-only", "--db", db]) == 0
    out = " ".join(capsys.readouterr().out.split())
    n = meta["fuas_after_mkfs"]
    assert f"{meta['fuas']} FUA, 3 marks; 40 crash states" in out
    assert f"spread over the {n} the generators cut" in out
    assert f"--set crash.max_states={n} checks them all" in out
    with Store.open(Path(db), create=False) as st:
        run = st.runs()[0]
    assert run.summary["spread_from"] == n and run.summary["states"] == 40
