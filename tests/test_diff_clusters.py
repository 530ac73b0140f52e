"""``results diff A B --by cluster``: search findings clustered as ``results bugs``
clusters them (harness/report/search.py), one column per run or per kernel of a
campaign, written through the Store API as a search run writes them."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from harness.config.campaign import Element
from harness.errors import InputError
from harness.report import cluster_diff
from harness.store.campaigns import element_update
from harness.store.db import RunEnv, RunStatus, Store
from tests.synth import run_results_cli

OLD, NEW = "6.12.43+deb12-amd64", "6.12.117+deb12-amd64"
LOSS = {"outcome": "data_loss", "rule": "content", "role": "destination"}
MOUNT = {"outcome": "mount_failed", "rule": "guest mount", "role": "-"}


def search_run(
    st: Store, fs: str, kernel: str, found: list[tuple[str, dict[str, str], str]]
) -> str:
    """A finished search run on ``kernel`` with findings (state id, symptom, ops)."""
    run = st.begin_run("ace-seq1", "search", {}, 1, fs=fs, env=RunEnv(guest_kernel=kernel))
    for sid, sym, ops in found:
        cell = {"fs": fs, "op_class": "link", **sym}
        wid = sid.split("/")[0]
        st.record_observation(run, f"bug:{sid}", cell, {"workload": wid, "ops": ops}, None)
    st.finish_run(run, RunStatus.DONE)
    return run


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """btrfs on two kernels: a loss on both (its smallest workload differs), a failed
    mount on the old one only; xfs clean on the old kernel, a loss on the new one; and
    the four runs as one campaign."""
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        runs = {
            "btrfs-old": search_run(st, "btrfs", OLD, [
                ("xseq1-000002/aa", LOSS, "link(foo, bar) fsync(foo)"),
                ("xseq1-000007/bb", LOSS, "link(foo, A/bar) fsync_dir(A)"),
                ("xseq1-000009/cc", MOUNT, "rmdir(A) fsync_dir()"),
            ]),
            "btrfs-new": search_run(st, "btrfs", NEW, [
                ("xseq1-000007/dd", LOSS, "link(foo, A/bar) fsync_dir(A)"),
            ]),
            "xfs-old": search_run(st, "xfs", OLD, []),
            "xfs-new": search_run(st, "xfs", NEW, [
                ("xseq1-000002/ee", LOSS, "link(foo, bar) sync()"),
            ]),
        }  # fmt: skip
        els = [
            Element(i, "ace-seq1", (f"fs.type={n[:-4]}", f"kernel={OLD if 'old' in n else NEW}"), 1)
            for i, n in enumerate(runs)
        ]
        st.begin_campaign(
            "c0c0c0c0c0c0", "kernels-search", "k.toml", "h", "{}", "2026-01-01", "h", 1
        )
        st.add_campaign_elements(
            "c0c0c0c0c0c0",
            [(e.key, e.position, e.scenario, json.dumps(list(e.overrides)), e.seed) for e in els],
        )
        for el, run in zip(els, runs.values(), strict=True):
            st.update_element(element_update("c0c0c0c0c0c0", el.key, status="done", run_id=run))
    return db, runs


def test_two_runs_one_column_each(store: tuple[Path, dict[str, str]]) -> None:
    db, runs = store
    with Store.open(db) as st:
        d = cluster_diff.diff_clusters(st, [runs["btrfs-old"][:6], runs["btrfs-new"]])
    assert [c.kernel for c in d.columns] == [OLD, NEW]
    (loss, a_b), (mount, a_only) = d.rows
    assert (loss["rule"], mount["rule"]) == ("content", "guest mount")
    assert a_b[0] and a_b[1] and a_only[0] and a_only[1] is None
    # each side its own smallest workload's state, with its run
    assert a_b[0]["smallest"] == {
        "workload": "xseq1-000002", "ops": "link(foo, bar) fsync(foo)",
        "state": "xseq1-000002/aa", "run": runs["btrfs-old"],
    }  # fmt: skip
    assert a_b[1]["smallest"]["state"] == "xseq1-000007/dd"
    assert (d.common, d.only(0), d.only(1)) == (1, 1, 0)


def test_one_campaign_over_two_kernels_is_a_column_per_kernel(
    store: tuple[Path, dict[str, str]],
) -> None:
    db, runs = store
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert (
            run_results_cli(
                ["results", "diff", "c0c0", "--by", "cluster", "--db", str(db), "--json"]
            )
            == 0
        )
    got = json.loads(buf.getvalue())
    cols = [c["label"] for c in got["columns"]]
    assert cols == [f"c0c0c0c0 {OLD}", f"c0c0c0c0 {NEW}"]
    assert got["columns"][0]["runs"] == [runs["btrfs-old"], runs["xfs-old"]]
    # btrfs's loss on both, its mount failure on the old kernel, xfs's loss on the new
    assert (got["common"], got["only"]) == (1, {cols[0]: 1, cols[1]: 1})
    xfs = next(c for c in got["clusters"] if c["fs"] == "xfs")
    assert xfs["in"][cols[0]] is None and xfs["in"][cols[1]]["smallest"]["run"] == runs["xfs-new"]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run_results_cli(["results", "diff", "c0c0", "--by", "cluster", "--db", str(db)]) == 0
    text = buf.getvalue()
    assert "3 clusters: 1 common to all, 1 only in A, 1 only in B" in text
    assert "B: absent" in text and f"xseq1-000002/ee (run {runs['xfs-new']})" in text


def test_three_runs_and_what_cannot_be_compared(store: tuple[Path, dict[str, str]]) -> None:
    db, runs = store
    with Store.open(db) as st:
        d = cluster_diff.diff_clusters(st, [runs["btrfs-old"], runs["btrfs-new"], runs["xfs-new"]])
        assert len(d.columns) == 3 and d.common == 0
        with pytest.raises(InputError, match="one column"):
            cluster_diff.diff_clusters(st, [runs["btrfs-old"]])
    with pytest.raises(InputError, match="two runs or two campaigns"):
        run_results_cli(["results", "diff", runs["btrfs-old"], "--db", str(db)])
