"""ACE's bounded space (harness/model/ace.py, acespace.py): its size, its indices, and the
soundness of the oracle on every seq-1 workload run for real on this host's filesystem."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from harness.guest import opgen
from harness.model import ace, acespace, oracle


def test_seq1_is_enumerated_exactly_and_every_index_decodes_to_a_valid_workload() -> None:
    picked = acespace.selection(1, 0, 1)
    assert len(picked) == len(set(picked)) > 200  # ACE's seq-1 is a few hundred
    classes = {ace.describe(1, i)["op_class"] for i in picked}
    # every op family of ACE's grammar is in the space
    for want in ("creat", "mkdir", "rmdir", "dwrite-append", "mwrite", "punch-hole",
                 "zero-range", "falloc-keep-size", "link", "unlink", "rename-over",
                 "rename-dir", "truncate-shrink", "setxattr", "removexattr"):  # fmt: skip
        assert want in classes
    persist = {ace.describe(1, i)["persistence"] for i in picked}
    assert persist == {"fsync", "fdatasync", "fsync_dir", "sync"}


def test_invalid_combinations_are_not_workloads() -> None:
    """seq-2: a write to a file the first op unlinked is not in the space."""
    unlink = next(c for c in ace.cores() if c.op_class == "unlink" and c.path == "foo")
    write = next(c for c in ace.cores() if c.op_class == "append" and c.path == "foo")
    assert not acespace.valid([(unlink, ("sync", "")), (write, ("sync", ""))])
    assert acespace.valid([(write, ("none", "")), (unlink, ("sync", ""))])
    assert not acespace.valid([(unlink, ("fsync", "foo"))])


def test_a_sample_is_seeded_sorted_and_bounded_by_the_space() -> None:
    a, b = acespace.selection(2, 50, 7), acespace.selection(2, 50, 7)
    assert a == b == sorted(a) and len(a) == 50
    assert acespace.selection(2, 50, 8) != a
    assert all(acespace.valid(ace.decode(2, i)) for i in a)
    with pytest.raises(ValueError, match="larger than seq-1's"):
        acespace.selection(1, ace.space(1) + 1, 1)


@pytest.mark.parametrize("grammar", ace.GRAMMARS)
def test_every_seq1_workload_holds_its_oracle_at_every_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grammar: str
) -> None:
    """Run each seq-1 workload on this host's ext4 and snapshot the tree at each mark (a
    crash cut exactly there keeps what the tree held): whatever a mark requires must
    hold there. A rule of the new ops (fallocate modes, O_DIRECT and mmap writes, xattrs,
    rmdir, directory rename) that requires more than Linux did fails here."""
    snaps: dict[str, Path] = {}
    root = tmp_path / "root"

    def snapshot(mark_cmd: str, dm_name: str, text: str) -> None:
        snaps[text] = tmp_path / text.replace(":", "_")
        subprocess.run(["cp", "-a", str(root), str(snaps[text])], check=True)

    monkeypatch.setattr(opgen, "emit_mark", snapshot)
    for index in acespace.selection(1, 0, 1, grammar=grammar):
        subprocess.run(["rm", "-rf", str(tmp_path)], check=True)
        root.mkdir(parents=True)
        snaps.clear()
        body = opgen.execute(str(root), ace.ops_of(1, index, grammar))
        label = ace.describe(1, index, grammar)["ops"]
        assert body["complete"], (label, body["error"])
        o = {"format": oracle.FORMAT, **body}
        for entry in body["marks"]:
            for exact in (False, True):
                v = oracle.verify(str(snaps[entry["mark"]]), o, entry["mark"], exact)
                assert v.ok, (label, entry["mark"], exact, v)
        final = oracle.requirements(o, body["final_mark"], True)
        assert final is not None and final["files"], label  # the final sync requires files


def test_indices_name_exact_workloads_and_filters_still_apply() -> None:
    """``workload.indices``: a family picked by hand (e.g. a file fsync'd, then renamed)."""
    picked = acespace.selection(2, 0, 1, classes=["append", "rename"], limit=400)
    assert acespace.selection(2, 0, 1, indices=picked[::-1]) == picked
    assert acespace.selection(2, 0, 1, classes=["append"], indices=picked) == [
        i for i in picked if all(c.op_class == "append" for c, _ in ace.decode(2, i))
    ]
    few = acespace.selection(2, 5, 3, indices=picked)
    assert (
        len(few) == 5
        and set(few) <= set(picked)
        and few == acespace.selection(2, 5, 3, indices=picked)
    )


def test_an_index_outside_the_space_or_invalid_names_the_key() -> None:
    from harness.config import scenario
    from harness.errors import InputError

    invalid = next(i for i in range(ace.space(2)) if not acespace.valid(ace.decode(2, i)))
    for bad in (ace.space(2), invalid):
        with pytest.raises(InputError) as e:
            scenario.load("ace-seq1", ("workload.seq=2", f"workload.indices=[{bad}]"))
        text = str(e.value) + str(getattr(e.value, "hint", ""))
        assert "indices" in text and str(bad) in text


def test_relog_keeps_workloads_acting_again_on_a_file_they_fsynced() -> None:
    """The btrfs log-tree family: fsync(foo) then rename(foo) -- but not after a sync,
    which commits the transaction, and not when the fsync'd file is another one."""
    core = {(c.op_class, c.path, c.dst): c for c in ace.cores()}
    append, rename = core[("append", "foo", "")], core[("rename", "foo", "bar")]
    other = core[("append", "A/foo", "")]
    assert acespace.relogs([(append, ("fsync", "foo")), (rename, ("fsync", "bar"))])
    assert acespace.relogs([(append, ("fdatasync", "foo")), (rename, ("sync", ""))])
    assert not acespace.relogs([(append, ("sync", "")), (rename, ("fsync", "bar"))])
    assert not acespace.relogs([(other, ("fsync", "A/foo")), (rename, ("fsync", "bar"))])
    picked = acespace.selection(2, 0, 1, classes=["append", "link", "rename"], relog=True)
    assert picked and all(acespace.relogs(ace.decode(2, i)) for i in picked)
    assert acespace.selection(1, 0, 1, relog=True) == []


def test_ace_x_adds_the_classes_real_bugs_need_and_keeps_aces_space() -> None:
    """ace-x's exact counts (printed for the note) and its classes; ACE's own space and
    indices are unchanged, so every stored ace workload keeps its meaning."""
    assert (ace.space(1), ace.space(2)) == (213, 56445)
    counts = {seq: ace.space(seq, "ace-x") for seq in (1, 2, 3)}
    print(
        "ace-x spaces:", counts, "valid seq-1:", len(acespace.selection(1, 0, 1, grammar="ace-x"))
    )
    assert counts[1] == 281
    new = {c.op_class for c in ace.cores("ace-x")} - {c.op_class for c in ace.cores()}
    assert new == {
        "truncate-zero", "chmod", "symlink", "exchange", "rename-noreplace", "rename-dir-out",
        "unlink-held", "rmdir-held", "tmpfile-link",
    }  # fmt: skip
    assert ace.describe(1, 5, "ace-x")["id"] == "xseq1-000005"
    assert ace.describe(1, 5, "ace-x")["ops"] == ace.describe(1, 5)["ops"]  # ACE's first


def test_ace_n_puts_names_in_the_new_directory_and_keeps_ace_xs_space() -> None:
    """ace-n: ace-x, and a file created, linked or renamed into ``B`` once a workload made
    it, or made at ``A/C`` once the directory left -- the shapes of btrfs's log-tree fixes
    between 6.12.57 and 6.12.69, which no ace-x workload has. ace-x's space and ids are
    unchanged."""
    assert ace.space(2, "ace-x") == 98350 and ace.cores("ace-n")[: len(ace.cores("ace-x"))] == (
        ace.cores("ace-x")
    )
    # seq-1 gains only rename(A/C, bar) of the directory itself (A/C is not yet a file)
    seq1 = {
        ace.describe(1, i, "ace-n")["ops"] for i in acespace.selection(1, 0, 1, grammar="ace-n")
    }
    assert len(seq1) == 284 and all(s.startswith("rename(A/C, bar)") for s in seq1 - {
        ace.describe(1, i, "ace-x")["ops"] for i in acespace.selection(1, 0, 1, grammar="ace-x")
    })  # fmt: skip
    added = [c.label() for c in ace.cores("ace-n")[len(ace.cores("ace-x")) :]]
    assert added == ["creat(B/bar)", "link(foo, B/bar)", "rename(foo, B/bar)",
                     "link(A/foo, B/bar)", "rename(A/foo, B/bar)",
                     "creat(A/C)", "rename(A/C, bar)"]  # fmt: skip
    # each bug's steps (campaigns/known-bugs/) as one workload of ace-n
    for steps in (
        "mkdir(B); append(foo) fsync(foo); link(foo, B/bar) fsync_dir()",  # bfe3d755ef7c
        "rename-dir-out(A/C, C); creat(A/C) fsync(A/C); rename(A/C, bar) fsync(bar)",
        "overwrite(foo) fsync(foo); mkdir(B); creat(B/bar); rename(foo, bar) fsync_dir()",
    ):
        seq = steps.count(";") + 1
        i = ace.index_of(steps, "ace-n")
        assert ace.describe(seq, i, "ace-n")["ops"] == steps
        assert acespace.valid(ace.decode(seq, i, "ace-n"))
    # without the mkdir, B/bar has no directory; while A/C is a directory, no file there
    for label in ("link(foo, B/bar)", "creat(A/C)"):
        core = next(c for c in ace.cores("ace-n") if c.label() == label)
        assert not acespace.valid([(core, ("sync", ""))])


def test_index_of_is_decodes_inverse_and_names_a_misspelt_op() -> None:
    for seq, grammar in ((1, "ace"), (2, "ace-x"), (3, "ace-n")):
        for i in acespace.selection(seq, 20, seq, grammar=grammar):
            assert ace.index_of(ace.describe(seq, i, grammar)["ops"], grammar) == i
    for grammar in ace.GRAMMARS:  # a label names one op: the inverse is unique
        for last in (True, False):
            labels = [ace.unit_label(c, p) for c, p in ace.units(last, grammar)]
            assert len(set(labels)) == len(labels)
    with pytest.raises(ValueError, match=re.escape("'creat(B/bar)' is no op of ace-x's")):
        ace.index_of("mkdir(B); creat(B/bar)", "ace-x")


def test_a_held_descriptors_fsync_follows_its_unlink() -> None:
    held = next(
        i for i in acespace.selection(1, 0, 1, classes=["unlink-held"], grammar="ace-x")
        if ace.describe(1, i, "ace-x")["persistence"] == "fsync_fd"
    )  # fmt: skip
    kinds = [op.kind for op in ace.ops_of(1, held, "ace-x")[-3:]]
    assert kinds == ["open", "unlink", "fsync_fd"]
