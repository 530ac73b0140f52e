"""Grouped tables and export over a synthetic store (real SQLite, written by Store)."""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.report import query
from harness.store.db import Store
from tests.synth import run_results_cli


def test_recovery_by_fs_and_mode(db: tuple[Path, dict[str, str]]) -> None:
    path, _ = db
    with Store.open(path) as st:
        t = query.grouped(st, "recovery", ["fs", "data_mode"])
    keys = [g.key for g in t.groups]
    assert keys == [("ext4", "journal"), ("ext4", "ordered"), ("xfs", None)]
    ordered = t.groups[1]
    assert ordered.counted == 8
    assert ordered.counts == {"consistent": 5, "repaired": 2, "data_loss": 1}
    fsck = ordered.stats["fsck"]
    # run 1: 0.1..0.4, run 2: 0.2..0.8
    values = sorted([0.1, 0.2, 0.3, 0.4, 0.2, 0.4, 0.6, 0.8])
    assert fsck.n == 8
    assert fsck.mean == pytest.approx(sum(values) / 8)
    assert fsck.max == pytest.approx(0.8)
    assert fsck.p50 == pytest.approx(0.35)  # between 0.3 and 0.4
    assert list(ordered.stats) == ["fsck", "mount"]  # phase order of the Phase enum
    assert t.outcomes == ["consistent", "repaired", "data_loss"]  # severity order
    # Asking for the split field as a key changes nothing: the statistics split by phase
    # already, and the per-item outcome counts have no phase to group by.
    with Store.open(path) as st:
        again = query.grouped(st, "recovery", ["fs", "phase", "data_mode"])
    assert again.by == t.by and [g.counts for g in again.groups] == [g.counts for g in t.groups]


def test_group_by_kernel_param_and_local_fields(db: tuple[Path, dict[str, str]]) -> None:
    path, ids = db
    with Store.open(path) as st:
        by_kernel = query.grouped(st, "recovery", ["kernel"])
        assert [g.key for g in by_kernel.groups] == [("6.1.0-18-amd64",), ("6.12.0-amd64",)]
        by_ops = query.grouped(st, "recovery", ["ops"])  # unique leaf of workload.ops
        assert [g.key for g in by_ops.groups] == [(50,), (80,)]
        by_gen = query.grouped(st, "recovery", ["generator", "scenario"], runs=[ids["xfs"]])
        assert [g.key for g in by_gen.groups] == [("fua", "xfs-fsync"), ("mark", "xfs-fsync")]
        assert sum(g.counted for g in by_gen.groups) == 3
        everything = query.grouped(st, "recovery", [])
        assert len(everything.groups) == 1 and everything.groups[0].counted == 13


def test_unknown_field_lists_valid_ones(db: tuple[Path, dict[str, str]]) -> None:
    path, _ = db
    with Store.open(path) as st, pytest.raises(InputError) as e:
        query.grouped(st, "recovery", ["fs", "colour"])
    assert "colour" in e.value.message
    assert e.value.hint and "data_mode" in e.value.hint and "workload.ops" in e.value.hint
    with Store.open(path) as st, pytest.raises(InputError) as e2:
        query.grouped(st, "recover", ["fs"])
    assert e2.value.hint and "recovery" in e2.value.hint


def test_registered_kind_is_usable(
    db: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, ids = db
    with Store.open(path) as st:
        for fill, secs in ((0.25, 10.0), (0.25, 12.0), (0.75, 30.0)):
            st.add_zfs_scan(
                ids["xfs"],
                repetition=1,
                kind="resilver",
                layout="mirror",
                fill=fill,  # type: ignore[arg-type]
                seconds=secs,
            )
    test = query.TableKind(
        name="test-resilver",
        help="test",
        source="SELECT run_id, layout, fill, seconds FROM zfs_scans WHERE kind = 'resilver'",
        fields={"layout": "o.layout", "fill": "o.fill"},
        value="seconds",
        default_by=("layout", "fill"),
    )
    # as a kind's record would list it
    monkeypatch.setattr(query, "table_kinds", lambda: {test.name: test})
    with Store.open(path) as st:
        t = query.grouped(st, "test-resilver", ["layout", "fill"])
    assert [(g.key, g.stats["seconds"].mean) for g in t.groups] == [
        (("mirror", 0.25), 11.0),
        (("mirror", 0.75), 30.0),
    ]
    assert t.outcomes == []


def test_cli_table_json_and_text(
    db: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = db
    assert (
        run_results_cli(
            ["results", "table", "recovery", "--by", "fs,data_mode", "--db", str(path), "--json"]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["by"] == ["fs", "data_mode"]
    assert out["groups"][1]["key"] == {"fs": "ext4", "data_mode": "ordered"}
    assert out["groups"][1]["stats"]["fsck"]["n"] == 8
    assert run_results_cli(["results", "table", "recovery", "--db", str(path)]) == 0
    text = capsys.readouterr().out
    for word in ("fs", "data_mode", "journal", "p95 s", "data_loss", "fsck"):
        assert word in text


def test_export_csv_and_json(
    db: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, ids = db
    assert (
        run_results_cli(["results", "export", ids["xfs"], ids["ordered"][:6], "--db", str(path)])
        == 0
    )
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 7
    assert rows[0]["run_id"] == ids["xfs"] and rows[-1]["run_id"] == ids["ordered"]
    assert rows[-1]["outcome"] == "repaired" and float(rows[-1]["fsck_seconds"]) == 0.4
    out = tmp_path / "x.json"
    assert (
        run_results_cli(
            [
                "results",
                "export",
                "--format",
                "json",
                ids["journal"],
                "-o",
                str(out),
                "--db",
                str(path),
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    assert data["runs"][0]["id"] == ids["journal"] and len(data["states"]) == 2
    assert data["states"][0]["mount_seconds"] == pytest.approx(0.01)


def test_export_unknown_run_is_input_error(db: tuple[Path, dict[str, str]]) -> None:
    path, _ = db
    with pytest.raises(InputError):
        run_results_cli(["results", "export", "nosuchrun", "--db", str(path)])


def test_views_are_queryable(db: tuple[Path, dict[str, str]]) -> None:
    path, ids = db
    with Store.open(path) as st:
        runs = st.execute("SELECT run_id, data_mode, states, findings FROM v_runs ORDER BY run_id")
        assert (ids["ordered2"], "ordered", 4, 2) in runs
        states = st.execute(
            "SELECT outcome, recovery_seconds FROM v_states WHERE run_id = ? ORDER BY prefix",
            (ids["xfs"],),
        )
        assert states[0][0] == "consistent" and states[0][1] == pytest.approx(0.11)


def test_summarise_has_stdev_and_min() -> None:
    s = query.summarise("fsck", [3.0, 1.0, 2.0, 6.0])
    assert (s.n, s.min, s.max, s.mean) == (4, 1.0, 6.0, 3.0)
    assert s.stdev == pytest.approx(statistics.stdev([3.0, 1.0, 2.0, 6.0]))
    one = query.summarise("fsck", [0.5])
    assert (one.stdev, one.min, one.p95) == (0.0, 0.5, 0.5)
