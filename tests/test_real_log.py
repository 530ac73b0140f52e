"""A real dm-log-writes log recorded by the lab (tests/data/logs/README.md says how).

Parses it, replays every entry and compares with the recorder's final disk, and checks
the ext4 crash state at every FUA with the host checker. Needs e2fsprogs on the host
(skipped otherwise), no guest.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from harness import proc, tools
from harness.check import e2undo, extfs, extjournal, jbd2
from harness.check import host as check
from harness.outcome import Outcome
from harness.record.logwrites import Log, open_log
from harness.replay.crashstates import at_fuas
from harness.replay.replayer import Replayer, image_digest


@pytest.fixture(scope="module")
def meta(ext4_small: tuple[Path, dict[str, Any]]) -> dict[str, Any]:
    return ext4_small[1]


@pytest.fixture(scope="module")
def log_path(ext4_small: tuple[Path, dict[str, Any]]) -> Path:
    return ext4_small[0]


@pytest.fixture()
def log(log_path: Path) -> Any:
    with open_log(log_path) as lg:
        yield lg


def needs_e2fsprogs() -> None:
    for tool in ("e2fsck", "e2undo"):
        if not tools.available(tool):
            pytest.skip(f"{tool} not installed (e2fsprogs)")


def test_parses_as_recorded(log: Log, meta: dict[str, Any]) -> None:
    s = log.stats()
    want = meta["stats"]
    assert (s.entries, s.flushes, s.fuas, s.marks, s.discards) == (
        want["entries"],
        want["flushes"],
        want["fuas"],
        want["marks"],
        want["discards"],
    )
    assert log.sectorsize == meta["sectorsize"]
    assert log.hash == meta["log_sha256"]
    marks = list(log.marks.values())
    assert marks[0] == "crashlab:mkfs"
    syncs = [m for m in marks if m.startswith("crashlab:sync:")]
    # opgen numbers the completed syncs 1, 2, 3, ... in log order
    assert [int(m.rsplit(":", 1)[1]) for m in syncs] == list(range(1, len(syncs) + 1))
    assert len(syncs) == meta["syncs"]
    assert "crashlab:umount" in marks
    assert all(re.fullmatch(r"crashlab:(mkfs|umount|sync:\d+)|dm-log-writes-end", m) for m in marks)
    # mkfs comes first: the mkfs mark follows mkfs' own writes, the workload follows it
    mkfs = log.find_mark("crashlab:mkfs")
    assert mkfs is not None and mkfs > 0
    assert any(e.is_write for e in log.entries[:mkfs])
    assert log.extent() <= meta["device_size"]


def test_replaying_every_entry_gives_the_final_disk(
    log: Log, meta: dict[str, Any], tmp_path: Path
) -> None:
    img = tmp_path / "full.img"
    with Replayer(log, img, meta["device_size"]) as rp:
        rp.advance(len(log.entries))
    assert image_digest(img) == meta["dut_sha256"]


def test_the_final_disk_is_a_clean_ext4(log: Log, meta: dict[str, Any], tmp_path: Path) -> None:
    needs_e2fsprogs()
    img = tmp_path / "full.img"
    with Replayer(log, img, meta["device_size"]) as rp:
        rp.advance(len(log.entries))
    j = proc.run(["e2fsck", "-E", "journal_only", "-y", img], check=False)
    assert j.returncode == 0, j.stdout + j.stderr
    f = proc.run(["e2fsck", "-f", "-n", img], check=False)
    assert f.returncode == 0, f.stdout + f.stderr


def test_every_fua_state_passes_the_host_check(
    log: Log, meta: dict[str, Any], tmp_path: Path
) -> None:
    needs_e2fsprogs()
    states = at_fuas(log)
    assert len(states) == meta["fua_states"]
    outcomes: dict[int, Outcome] = {}
    with Replayer(log, tmp_path / "work.img", meta["device_size"]) as rp:
        for i, state in enumerate(rp.walk(states)):
            before = rp.digest() if i % 10 == 0 else None
            outcomes[state.prefix] = check.host_check(
                "ext4", rp.image, tmp_path / "scratch"
            ).outcome
            if before is not None:
                # the check undoes its journal replay: the image is the state again
                assert rp.digest() == before
    assert {p: o for p, o in outcomes.items() if o is not Outcome.CONSISTENT} == {}


@pytest.mark.parametrize("fast", [True, False], ids=["tmpfs", "no-tmpfs"])
def test_the_undo_file_goes_to_tmpfs_and_away(
    log: Log, meta: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    """The -z path, taken whenever harness/check/jbd2.py cannot model the image (made
    to here: the states of this log are all modelled)."""
    needs_e2fsprogs()
    undo_dir = tmp_path / "fast"
    if fast:
        undo_dir.mkdir()
    monkeypatch.setattr(extjournal, "UNDO_DIR", undo_dir)

    def unsure(fd: int, changes: object = None) -> list[tuple[int, int]]:
        raise extfs.Unsure("made to fall back")

    monkeypatch.setattr(jbd2, "replay_writes", unsure)
    calls: list[list[str]] = []
    real_run = proc.run

    def spy(argv: Any, **kw: Any) -> proc.Result:
        calls.append([str(a) for a in argv])
        return real_run(argv, **kw)

    monkeypatch.setattr(proc, "run", spy)
    restored: list[int | None] = []
    real_restore = e2undo.restore

    def spy_restore(undo: Path, image: Path) -> int | None:
        restored.append(real_restore(undo, image))
        return restored[-1]

    monkeypatch.setattr(e2undo, "restore", spy_restore)
    scratch = tmp_path / "scratch"
    state = at_fuas(log)[0]  # right after the first mount: the journal needs recovery
    with Replayer(log, tmp_path / "work.img", meta["device_size"]) as rp:
        rp.goto(state)
        before = rp.digest()
        r = check.host_check("ext4", rp.image, scratch)
        assert r.outcome is Outcome.CONSISTENT, r.output
        assert rp.digest() == before
    z = [Path(a[a.index("-z") + 1]) for a in calls if "-z" in a]
    assert len(z) == 1 and z[0].parent == (undo_dir if fast else scratch)
    # there was a journal replay to undo, undone in this process, not by e2undo
    assert len(restored) == 1 and restored[0]
    assert not any(a[0] == "e2undo" for a in calls)
    assert not z[0].exists()
