"""Blocks explained (harness/triage): the writes of a crash state of the recorded fixture
(tests/data/logs/README.md), each block named with e2fsprogs on the image file. The
state is stored by a host-only check-log run, as ``scenario explain`` finds it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.cli.main import main
from harness.errors import InputError
from harness.record.logwrites import FUA, METADATA, Entry
from harness.store.db import Store
from harness.triage import blocks, explain
from tests.synth import host_only_check_log

ORACLE = Path(__file__).parent / "data" / "logs" / "ext4-ops-small.oracle.json"
DATA_STATE = 161  # the FUA after sync:6: file data, then journal transaction 6 and its commit
META_STATE = 144  # the FUA after sync:4: checkpointed metadata, then transaction 5


@pytest.fixture()
def stored(
    ext4_small: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, dict[int, str]]:
    """A store holding the fixture's FUA states; its path and the state ids by prefix."""
    db, r = host_only_check_log(ext4_small[0], tmp_path, monkeypatch)
    with Store.open(db, create=False) as st:
        states = st.run_detail(r.run_id).states
    return db, {s.prefix: s.id for s in states}


def test_a_fua_state_names_journal_inode_table_and_file_blocks(
    stored: tuple[Path, dict[int, str]],
) -> None:
    db, ids = stored
    x = explain.explain_state(ids[DATA_STATE], db)
    assert x.which.startswith("the writes after mark 'crashlab:sync:6' (entry 150)")
    whats = {e.entry.index: [w for _, w in e.blocks] for e in x.explanation.writes}
    assert sorted(whats) == [151, 152, 153, 154, 155, 156, 157, 158, 160]  # 159: bare flush
    journal = [w for ws in whats.values() for w in ws if w.kind == "journal"]
    assert {w.subject for w in journal} == {"transaction 6"}
    assert [w.detail.split(" (")[0] for w in whats[154] + whats[160]] == [
        "descriptor block",
        "commit block",
    ]
    # The journal's copies of inode-table blocks, named down to the inodes' paths.
    copies = [w.detail for w in journal if "copy of fs block" in w.detail]
    assert "copy of fs block 269: inode table of group 0: inodes 13-16: <14> /f3" in copies
    # The data blocks, with the file and the byte offset: files the workload wrote.
    wrote = {f"/{p}" for m in json.loads(ORACLE.read_text())["marks"] for p in m["files"]}
    data = [w for i in (151, 152, 153) for w in whats[i]]
    assert all(w.kind == "file data" and w.offset is not None for w in data)
    assert {p for w in data for p in w.subject.split(" = ")} <= wrote
    assert blocks.describe(whats[152][0]) == "file data of /f3 at byte 50176"
    # Six consecutive blocks of one file are one line.
    assert "  blocks 8568-8573: file data of /f7 = /d5/f8 at byte 56320" in x.explanation.lines()


def test_checkpointed_metadata_is_named_by_its_place(stored: tuple[Path, dict[int, str]]) -> None:
    db, ids = stored
    x = explain.explain_state(ids[META_STATE], db, (129, 137))
    lines = x.explanation.lines()
    for want in (
        "  block 1: superblock of group 0",
        "  block 2: group descriptors of group 0",
        "  block 258: block bitmap of group 0",
        "  block 262: inode bitmap of group 0",
        "  block 266: inode table of group 0: inodes 1-4: <2> /",
        "  block 2314: directory of / at byte 0",
    ):
        assert want in lines


def test_scenario_explain_prints_it_and_refuses_bad_input(
    stored: tuple[Path, dict[int, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    db, ids = stored
    assert main(["explain", ids[DATA_STATE][:8], "--db", str(db), "--entries", "152"]) == 0
    out = capsys.readouterr().out
    assert "entries 152..152:" in out and "block 8450: file data of /f3 at byte 50176" in out
    for argv, want in (
        (["--entries", "5..x"], "expected FIRST..LAST"),
        (["--entries", "150..999"], "the log has 183 entries"),
    ):
        assert main(["explain", ids[DATA_STATE], "--db", str(db), *argv]) == 2
        assert want in capsys.readouterr().err
    assert main(["explain", "0000dead", "--db", str(db)]) == 2
    assert "no crash state with id '0000dead'" in capsys.readouterr().err


def test_other_filesystems_say_so_per_write(tmp_path: Path) -> None:
    e = Entry(7, 2048, 8, FUA | METADATA, 4096, 4096, None)
    x = blocks.explain("f2fs", tmp_path / "absent.img", [e], [], lambda e: b"")
    assert x.lines() == [
        "entry 7: sectors 2048+8 [FUA|META]",
        "  sectors 2048-2055: not explained for f2fs yet",
    ]


def test_entries_are_first_dot_dot_last() -> None:
    assert explain.parse_entries("150..160") == (150, 160)
    assert explain.parse_entries("7") == (7, 7)
    with pytest.raises(InputError):
        explain.parse_entries("9..3")
