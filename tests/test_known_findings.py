"""docs/findings/known.toml: triaged findings labelled in ``results bugs`` and ``results
diff --by cluster`` (harness/report/known.py), so a nightly's reader sees what is new."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.report import known
from harness.store.db import Store
from tests.synth import run_results_cli
from tests.test_diff_clusters import LOSS, NEW, OLD, search_run

# The symptom the xfs exchange finding's states carried (run 6b056130fd6d, ace-x seq-1 on
# 6.1.0-56, docs/findings/xfs-exchange-fsync.md): `results bugs` cluster 2.
EXCHANGE = {"outcome": "data_loss", "rule": "content", "role": "target", "op_class": "exchange"}


def test_the_catalogue_loads_and_each_entry_has_its_document() -> None:
    entries = known.load()
    assert len({k.name for k in entries}) == len(entries) >= 4
    assert all((known.paths.REPO / k.doc).is_file() for k in entries)
    assert known.label({"fs": "xfs", **EXCHANGE}).name == "xfs-exchange-fsync"  # type: ignore[union-attr]
    # the same symptom on another filesystem, or another op class, is new
    assert known.label({"fs": "ext4", **EXCHANGE}) is None
    assert known.label({"fs": "xfs", **EXCHANGE, "op_class": "link"}) is None
    # a seq-2 workload holding the class (run d12912f2691a's data-ns-mix cluster)
    held = {"fs": "btrfs", "outcome": "data_loss", "rule": "removal-undone", "role": "target"}
    got = known.label({**held, "op_class": "dwrite-overwrite+unlink-held"})
    assert got is not None and got.name == "btrfs-unlinked-fsync-resurrects"
    assert known.label({**held, "op_class": "dwrite-overwrite+unlink"}) is None


def test_results_bugs_labels_the_known_cluster_and_counts_the_new(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        run = search_run(st, "xfs", OLD, [("xseq1-000002/aa", LOSS, "link(foo, bar) fsync(foo)")])
        st.record_observation(
            run, "bug:xseq1-000224/bb", {"fs": "xfs", **EXCHANGE},
            {"workload": "xseq1-000224", "ops": "exchange(foo, A/foo) fsync(foo)"}, None,
        )  # fmt: skip
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run_results_cli(["results", "bugs", run, "--db", str(db), "--json"]) == 0
    got = {c["op_class"]: c["known"] for c in json.loads(buf.getvalue())}
    assert got["link"] is None
    assert got["exchange"]["doc"] == "docs/findings/xfs-exchange-fsync.md"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run_results_cli(["results", "bugs", run, "--db", str(db)]) == 0
    assert "1 new, 1 known (docs/findings/known.toml)" in buf.getvalue()
    assert "known xfs-exchange-fsync (" in buf.getvalue()


def test_a_cluster_diff_labels_each_row(tmp_path: Path) -> None:
    """btrfs's known held-descriptor loss on the old kernel, a link loss on both."""
    held = {"outcome": "data_loss", "rule": "removal-undone", "role": "target",
            "op_class": "unlink-held"}  # fmt: skip
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        a = search_run(
            st,
            "btrfs",
            OLD,
            [
                ("xseq1-000247/aa", held, "unlink-held(foo) fsync_fd(@)"),
                ("xseq1-000002/bb", LOSS, "link(foo, bar) fsync(foo)"),
            ],
        )
        b = search_run(st, "btrfs", NEW, [("xseq1-000002/cc", LOSS, "link(foo, bar) fsync(foo)")])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run_results_cli(["results", "diff", a, b, "--by", "cluster", "--db", str(db),
                                "--json"]) == 0  # fmt: skip
    rows = {r["op_class"]: r for r in json.loads(buf.getvalue())["clusters"]}
    assert rows["link"]["known"] is None
    assert rows["unlink-held"]["known"]["name"] == "btrfs-unlinked-fsync-resurrects"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run_results_cli(["results", "diff", a, b, "--by", "cluster", "--db", str(db)]) == 0
    assert "1 new, 1 known (docs/findings/known.toml)" in buf.getvalue()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[[finding]]\nname="x"\nverdict="v"\ndoc="docs/nope.md"\nfs="xfs"\n', "no such document"),
        ('[[finding]]\nname="x"\nverdict="v"\ndoc="README.md"\nfs="xfs"\nop="a"\n', "'finding"),
    ],
)
def test_a_bad_catalogue_names_the_file_and_the_key(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "known.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=said) as e:
        known.load(path)
    assert str(path) in str(e.value)
