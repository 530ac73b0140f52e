"""Application update patterns (harness/guest/apppat.py, sqlitepat.py) run on the host
with --mark-cmd none: the plan is seeded, the oracle is the op generator's, and the
classifier tells each kind of damaged target apart. The crash states themselves come
from real guests in tests/test_patterns_vm.py, and so does e4defrag: what a filesystem
does is tested in a guest, never on the host kernel's filesystems."""

from __future__ import annotations

import csv
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from harness.guest import apppat, sqlitepat
from harness.model import oracle
from harness.store.db import RunKind, Store
from tests.synth import run_results_cli


def run(tmp: Path, pattern: str, seed: int = 3, **extra: str) -> dict[str, Any]:
    root = tmp / "root"
    root.mkdir(exist_ok=True)
    args = ["--pattern", pattern, "--root", str(root), "--seed", str(seed), "--files", "1"]
    args += ["--mark-cmd", "none", "--oracle", str(tmp / "oracle.json")]
    for k, v in extra.items():
        args += [f"--{k}", v]
    assert apppat.main(args) == 0
    data: dict[str, Any] = json.loads((tmp / "oracle.json").read_text())
    return data


def classes(root: Path, o: dict[str, Any], mark: str | None, exact: bool = False) -> dict[str, str]:
    return {c["target"]: c["class"] for c in apppat.classify(str(root), o, mark, exact)}


@pytest.mark.parametrize("pattern", ["replace-rename", "replace-truncate", "append-log"])
def test_after_the_final_sync_every_target_is_new_and_promised(
    tmp_path: Path, pattern: str
) -> None:
    o = run(tmp_path, pattern)
    cases = apppat.CASES[pattern]
    assert [t["case"] for t in o["targets"]] == [label for label, _ in cases]
    got = apppat.classify(str(tmp_path / "root"), o, "crashlab:umount", False)
    assert {c["class"] for c in got} == {"new"} and all(c["promised"] for c in got)
    # The op generator's oracle holds too: the final mark requires every new content.
    assert oracle.verify(str(tmp_path / "root"), o, o["final_mark"], True).ok
    assert not list((tmp_path / "root").glob("*.tmp"))


def test_same_seed_same_plan_other_seed_other_content() -> None:
    a = apppat.plan("replace-rename", 5, 2, 8192)
    b = apppat.plan("replace-rename", 5, 2, 8192)
    c = apppat.plan("replace-rename", 6, 2, 8192)
    assert a == b
    assert [op.data for op in a[0]] != [op.data for op in c[0]]
    assert len(a[1]) == 2 * len(apppat.CASES["replace-rename"])


def test_a_target_is_counted_only_once_its_update_may_have_begun(tmp_path: Path) -> None:
    o = run(tmp_path, "replace-rename")
    last = {t["path"]: t["start_n"] for t in o["targets"]}
    assert sorted(last.values()) == list(last.values())  # in the order they are updated
    assert classes(tmp_path / "root", o, None) == {}  # right after mkfs: nothing begun
    early = classes(tmp_path / "root", o, "crashlab:sync:1")
    assert set(early) == {p for p, n in last.items() if n <= 1}


def test_what_the_promise_is_follows_the_pattern(tmp_path: Path) -> None:
    """Only fsync'd data under a durable name is promised at the mark after it."""
    o = run(tmp_path, "replace-rename")
    at = {t["case"]: t for t in o["targets"]}
    full = at["fsync tmp + rename + dir fsync"]
    nothing = at["rename without fsync"]
    after_dir_fsync = next(m["mark"] for m in o["marks"] if m["after_op"] > full["first_op"] + 3)
    got = {c["case"]: c["promised"] for c in apppat.classify(
        str(tmp_path / "root"), o, after_dir_fsync, False)}  # fmt: skip
    assert got[full["case"]] is True and got[nothing["case"]] is False


def test_classify_tells_each_kind_of_target_apart() -> None:
    old, new = os.urandom(9000), os.urandom(10000)
    mix = new[:4096] + old[4096:8192] + new[8192:]
    assert apppat.classify_bytes(new, old, new) == "new"
    assert apppat.classify_bytes(old, old, new) == "old"
    assert apppat.classify_bytes(b"", old, new) == "empty"
    assert apppat.classify_bytes(None, old, new) == "missing"
    assert apppat.classify_bytes(new[:5000], old, new) == "partial"
    assert apppat.classify_bytes(mix, old, new) == "partial"
    assert apppat.classify_bytes(bytes(10000), old, new) == "zeros"  # size, no data
    assert apppat.classify_bytes(new[:9000] + bytes(500), old, new) == "zeros"
    assert apppat.classify_bytes(new[:9000] + bytes(500) + b"x", old, new) == "garbage"
    assert apppat.classify_bytes(bytes(len(new) + 1), old, new) == "garbage"  # too long
    assert apppat.classify_bytes(new + b"x", old, new) == "garbage"


def test_classify_reads_the_mounted_tree(tmp_path: Path) -> None:
    o = run(tmp_path, "replace-truncate")
    root = tmp_path / "root"
    t0, t1, t2 = (t["path"] for t in o["targets"])
    (root / t0).write_bytes(b"")
    (root / t1).unlink()
    old = apppat.content(o["seed"], t2, "old", o["targets"][2]["old"])
    (root / t2).write_bytes(old)
    assert classes(root, o, o["final_mark"]) == {t0: "empty", t1: "missing", t2: "old"}


def test_unknown_pattern_lists_the_valid_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--pattern", "rename-replace", "--root", str(tmp_path), "--seed", "1"]
    assert apppat.main([*args, "--mark-cmd", "none", "--oracle", str(tmp_path / "o")]) == 2
    assert "replace-rename, replace-truncate, append-log, e4defrag, sqlite-commit" in (
        capsys.readouterr().err
    )


# --- SQLite -----------------------------------------------------------------------------


def test_sqlite_every_database_committed_after_the_final_sync(tmp_path: Path) -> None:
    o = run(tmp_path, "sqlite-commit", transactions="3", size="2048")
    assert len(o["databases"]) == 12
    got = apppat.classify(str(tmp_path / "root"), o, o["final_mark"], True)
    assert {c["class"] for c in got} == {"committed"} and not any(c["violated"] for c in got)
    assert {c["last"] for c in got} == {3}
    # Each mark knows which COMMITs had returned: one more per mark, round-robin.
    assert [sum(m["committed"].values()) for m in o["marks"][:4]] == [0, 1, 2, 3]
    assert sum(o["marks"][-1]["committed"].values()) == 3 * 12


def test_sqlite_a_lost_commit_breaks_only_a_durability_promise(tmp_path: Path) -> None:
    o = run(tmp_path, "sqlite-commit", transactions="2", size="1024")
    root = tmp_path / "root"
    for name in ("wal-full.db", "delete-off.db"):
        con = sqlite3.connect(root / name, isolation_level=None)
        con.execute("DELETE FROM t WHERE id = 2")
        con.execute("UPDATE meta SET last = 1")
        con.close()
    got = {c["target"]: c for c in apppat.classify(str(root), o, o["final_mark"], True)}
    assert got["wal-full.db"]["class"] == "rolled-back" and got["wal-full.db"]["violated"]
    assert got["delete-off.db"]["class"] == "rolled-back"
    assert not got["delete-off.db"]["violated"]


def test_sqlite_half_a_transaction_or_a_damaged_file_is_corrupt(tmp_path: Path) -> None:
    o = run(tmp_path, "sqlite-commit", transactions="2", size="1024")
    root = tmp_path / "root"
    con = sqlite3.connect(root / "wal-normal.db", isolation_level=None)
    con.execute("DELETE FROM t WHERE id = 2")  # meta.last still says 2
    con.close()
    with open(root / "delete-normal.db", "r+b") as f:
        f.write(b"\xff" * 100)  # the header is gone
    (root / "truncate-off.db").unlink()
    got = {c["target"]: c for c in apppat.classify(str(root), o, o["final_mark"], True)}
    assert got["wal-normal.db"]["class"] == "corrupt" and got["wal-normal.db"]["violated"]
    assert got["delete-normal.db"]["class"] == "corrupt"
    assert not got["delete-normal.db"]["violated"]  # rollback + NORMAL promises nothing
    assert got["truncate-off.db"]["class"] == "missing"


def test_sqlite_promises() -> None:
    assert sqlitepat.promise("DELETE", "EXTRA") == (True, True)
    assert sqlitepat.promise("WAL", "FULL") == (True, True)
    assert sqlitepat.promise("TRUNCATE", "FULL") == (True, True)
    assert sqlitepat.promise("DELETE", "FULL") == (False, True)  # the journal's unlink
    assert sqlitepat.promise("WAL", "NORMAL") == (False, True)
    assert sqlitepat.promise("DELETE", "NORMAL") == (False, False)
    assert sqlitepat.promise("WAL", "OFF") == (False, False)


# --- the table and the summary ------------------------------------------------------------


def test_patterns_table_and_summary_count_states_per_class(tmp_path: Path) -> None:
    from harness.report import patterns, query

    st = Store.open(tmp_path / "lab.sqlite")
    run_id = st.begin_run("replace-rename", RunKind.CRASH, {}, 1, fs="ext4")
    cell = {"fs": "ext4", "mount_options": "data=ordered,noauto_da_alloc", "target": "r-0"}
    cell |= {"workload": "replace-rename", "pattern": "rename without fsync"}
    for i, cls in enumerate(["new"] * 5 + ["empty"] * 2 + ["old"]):
        st.record_observation(run_id, f"s{i}:r-0", cell, {"class": cls, "size": 0}, None)
    st.record_observation(run_id, "other", {}, {"row": 1}, None)  # another kind's row
    table = query.grouped(st, "patterns", ["fs", "mount_options", "pattern"])
    (g,) = table.groups
    assert g.key == ("ext4", "data=ordered,noauto_da_alloc", "rename without fsync")
    assert dict(g.counts) == {"new": 5, "old": 1, "empty": 2}
    assert table.outcomes[:3] == ["new", "old", "empty"]  # best first, not alphabetical
    (line,) = patterns.summary_lines(st, run_id)
    assert line.startswith(
        "ext4 data=ordered,noauto_da_alloc, rename without fsync: 2 of 8 (state, file) pairs "
        "left the file empty"
    )
    out = patterns.plot_patterns(st, ["mount_options", "pattern"], tmp_path / "p.png")
    assert out.stat().st_size > 1000
    st.close()
    # Export carries the classes too: one row per (state, file), cell and metrics as columns.
    csv_out = tmp_path / "obs.csv"
    argv = ["results", "export", run_id, "--observations", "--db", str(tmp_path / "lab.sqlite")]
    assert run_results_cli([*argv, "-o", str(csv_out)]) == 0
    rows = list(csv.DictReader(csv_out.open()))
    assert len(rows) == 9 and rows[0]["item"] == "s0:r-0"
    assert [r["class"] for r in rows[:8]].count("empty") == 2
    assert rows[0]["pattern"] == "rename without fsync" and rows[-1]["row"] == "1"
    assert run_results_cli([*argv, "--format", "json", "-o", str(tmp_path / "o.json")]) == 0
    data = json.loads((tmp_path / "o.json").read_text())
    assert data["runs"][0]["id"] == run_id and data["observations"][6]["class"] == "empty"
