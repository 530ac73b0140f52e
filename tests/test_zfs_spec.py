"""ZFS scenarios: validation before any guest boots, --set, the sweep; the store and table."""

from __future__ import annotations

from pathlib import Path

import pytest

from faults.disk import FaultKind, When
from harness import paths
from harness.config import scenario
from harness.errors import InputError
from harness.experiments.zfs import pool
from harness.experiments.zfs.cells import Layout
from harness.experiments.zfs.settings import Experiment, ZfsScenario
from harness.outcome import Outcome
from harness.report import zfs as report
from harness.store import db as store

BASE = """
kind = "zfs"
description = "test"
experiment = "resilver"
layout = "raidz1"
disks = 4
fill = 75
[fault]
kind = "wipe"
disks = [0]
"""


def load(tmp_path: Path, text: str = BASE, overrides: tuple[str, ...] = ()) -> ZfsScenario:
    p = tmp_path / "z.toml"
    p.write_text(text)
    s = scenario.load(p, overrides)
    assert isinstance(s, ZfsScenario)
    return s


def error(tmp_path: Path, text: str = BASE, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(InputError) as e:
        load(tmp_path, text, overrides)
    return e.value.message + " " + (e.value.hint or "")


@pytest.mark.parametrize(
    "name", ["resilver-75pct", "scrub-zero-1disk", "scrub-zero-2disks", "resilver-sweep"]
)
def test_shipped(name: str) -> None:
    s = scenario.load(paths.REPO / "scenarios" / f"{name}.toml")
    assert isinstance(s, ZfsScenario) and s.kind == scenario.Kind.ZFS
    # The named scenarios are the sound ones: scans of seconds, not of a noisy instant.
    assert s.pool.disk_size >= 1 << 30 and s.pool.disks == 4


def test_defaults_and_overrides(tmp_path: Path) -> None:
    s = load(tmp_path, overrides=("layout=raidz2", "disks=6", "repeat=3", "fault.disks=[0, 5]"))
    assert (s.pool.layout, s.pool.disks, s.repeat) == (Layout.RAIDZ2, 6, 3)
    assert s.fault.kind is FaultKind.WIPE and s.fault.disks == (0, 5)
    assert s.fault.when is When.RUNNING and s.experiment is Experiment.RESILVER
    assert s.resolved()["layout"] == "raidz2"
    assert [c.pool.layout for c in s.cells()] == [Layout.RAIDZ2]


def test_sweep_cells(tmp_path: Path) -> None:
    s = load(tmp_path, overrides=("sweep.fill=[25, 50]", "sweep.layout=['mirror', 'raidz3']"))
    assert [(str(c.pool.layout), c.fill) for c in s.cells()] == [
        ("mirror", 25.0),
        ("mirror", 50.0),
        ("raidz3", 25.0),
        ("raidz3", 50.0),
    ]


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (("fill=0",), "(0, 95]"),
        (("fill=96",), "(0, 95]"),
        (("sweep.fill=[50, 120]",), "(0, 95]"),
        (("layout=raidz3", "disks=3"), "raidz3 needs at least 4 disks"),
        (("sweep.layout=['raidz3']", "disks=3"), "raidz3 needs at least 4 disks"),
        (("layout=raidz4",), "not one of"),
        (("fault.disks=[4]",), "from 0 to 3"),
        (("fault=zero-percent",), "a resilver needs a lost disk"),
        (("disk_size=32M",), "64 MiB"),
        (("repeat=0",), "at least 1"),
        (("recordsize=100K",), "power of 2"),
        (("nosuch=1",), "unknown key"),
    ],
)
def test_bad_input_is_an_input_error(tmp_path: Path, overrides: tuple[str, ...], says: str) -> None:
    assert says in error(tmp_path, overrides=overrides)


def test_scrub_may_not_wipe_and_zero_range_must_spare_labels(tmp_path: Path) -> None:
    scrub = BASE.replace('"resilver"', '"scrub"')
    assert "damages data in place" in error(tmp_path, scrub)
    ranged = scrub.replace('kind = "wipe"', 'kind = "zero"\noffset = 0\nlength = "1M"')
    assert "labels" in error(tmp_path, ranged)
    s = load(tmp_path, ranged.replace("offset = 0", 'offset = "1M"'))
    assert (s.fault.offset, s.fault.length) == (1 << 20, 1 << 20)


def test_unknown_key_in_file(tmp_path: Path) -> None:
    says = error(tmp_path, BASE.replace("layout =", "layuot ="))
    assert "unknown key 'layuot'" in says and "layout" in says


def test_crash_and_zfs_scenarios_load_and_are_listed() -> None:
    good, bad = scenario.survey(paths.REPO / "scenarios")
    assert not bad
    kinds = {s.name: isinstance(s, scenario.Scenario) for s in good}
    assert kinds["resilver-75pct"] is False and kinds["ext4-ordered-fsync"] is True


def _scan(st: store.Store, run_id: str, layout: str, fill: float, secs: float, rep: int) -> None:
    st.add_zfs_scan(
        run_id,
        repetition=rep,
        kind=store.ScanKind.RESILVER,
        layout=layout,
        seconds=secs,
        fill=fill + 0.3,
        examined=100,
        issued=100,
        repaired=secs * 1e6,  # type: ignore[arg-type]
        extra={
            "cell": {"layout": layout, "fill": fill, "disks": 4},
            "fill_target": fill,
            "bytes_per_second": 1e6 * 10 / secs,
            "data_errors": 0,
            "outcome": str(Outcome.CONSISTENT),
            "phases": {"boot": 10.0},
        },
    )


def test_store_and_aggregate(tmp_path: Path) -> None:
    with store.Store.open(tmp_path / "lab.sqlite") as st:
        run_id = st.begin_run("z", store.RunKind.ZFS, {"layout": "raidz1"}, 1, fs="zfs")
        for rep, secs in enumerate((1.0, 2.0, 3.0)):
            _scan(st, run_id, "raidz1", 50.0, secs, rep)
        _scan(st, run_id, "mirror", 25.0, 4.0, 0)
        with pytest.raises(ValueError):
            st.add_zfs_scan(
                run_id,
                repetition=0,
                kind=store.ScanKind.SCRUB,
                layout="x",
                seconds=1,
                extra={"nosuch": 1},
            )
        rows = st.zfs_scans(store.ScanKind.RESILVER)
    assert len(rows) == 4 and rows[0]["phases"] == {"boot": 10.0}
    cells = report.aggregate(rows, ["layout", "fill"])
    assert [(c["layout"], c["fill"], c["n"]) for c in cells] == [
        ("mirror", 25.0, 1),
        ("raidz1", 50.0, 3),
    ]
    r = cells[1]
    assert r["seconds"]["mean"] == pytest.approx(2.0) and r["seconds"]["stdev"] == pytest.approx(
        1.0
    )
    assert (r["seconds"]["min"], r["seconds"]["max"]) == (1.0, 3.0)
    assert r["mb_per_s"]["max"] == pytest.approx(10.0)


def test_table_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main as cli

    db = tmp_path / "lab.sqlite"
    with store.Store.open(db) as st:
        run_id = st.begin_run("z", store.RunKind.ZFS, {}, 1, fs="zfs")
        _scan(st, run_id, "raidz1", 50.0, 2.0, 0)
        _scan(st, run_id, "raidz1", 50.0, 4.0, 1)
    assert cli.main(["results", "zfs", "resilver", "--db", str(db), "--json"]) == 0
    out = capsys.readouterr().out
    assert '"n": 2' in out and '"stdev"' in out
    assert cli.main(["results", "table", "resilver", "--by", "layout,fill", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "raidz1" in out and "MB/s" in out
    assert cli.main(["results", "zfs", "resilver", "--by", "colour", "--db", str(db)]) == 2
    # A plot of one run is of that run only: a second run's scans (other disks, say) are
    # not on its lines, and a run without scans has nothing to plot.
    from harness.report import plots

    with store.Store.open(db) as st:
        other = st.begin_run("z", store.RunKind.ZFS, {}, 1, fs="zfs")
        _scan(st, other, "mirror", 25.0, 1.0, 0)
        empty = st.begin_run("z", store.RunKind.ZFS, {}, 1, fs="zfs")
        drawn = plots.plot_scans(st, ["layout", "fill"], tmp_path / "one.png", runs=[run_id])
        assert drawn.stat().st_size > 5000
        with pytest.raises(plots.NoData):
            plots.plot_scans(st, ["layout", "fill"], tmp_path / "none.png", runs=[empty])
    png = tmp_path / "cli.png"
    assert cli.main(["results", "plot", "resilver", empty, "--db", str(db), "-o", str(png)]) == 0
    assert "nothing to plot" in capsys.readouterr().out and not png.exists()


def test_the_named_sweep_is_the_sound_one_and_ci_is_small() -> None:
    full = scenario.load("resilver-sweep", ())
    ci = scenario.load("resilver-sweep-ci", ())
    assert full.disk_size >= 1 << 30 and full.repeat >= 3 and full.fill_once
    assert len(list(full.cells())) == 12
    assert ci.disk_size <= 128 << 20 and len(list(ci.cells())) * ci.repeat <= 8


def test_seed_003s_other_factors_are_sweep_axes() -> None:
    axes = (
        'sweep.layout=["raidz1"]',
        "sweep.fill=[50]",
        "sweep.disks=[3, 5]",
        "sweep.cache=[false, true]",
        "sweep.load=[false, true]",
        'sweep.recordsize=["128K", "16K"]',
    )
    sc = scenario.load("resilver-sweep-ci", axes)
    cells = list(sc.cells())
    assert len(cells) == 16 and len({c.label() for c in cells}) == 16
    widths = {c.pool.disks for c in cells}
    assert widths == {3, 5} and {c.load for c in cells} == {False, True}
    odd = next(c for c in cells if c.pool.cache and c.load and c.pool.recordsize == 16384)
    assert "+cache" in odd.label() and "+load" in odd.label() and "rs 16K" in odd.label()


def test_sequential_rebuild_and_stripe_width_are_checked_before_a_guest_boots() -> None:
    with pytest.raises(InputError, match=r"sequential.*refuses raidz1") as e:
        scenario.load("resilver-75pct", ("sequential=true",))
    assert "mirror" in (e.value.hint or "")
    assert scenario.load("resilver-75pct", ("sequential=true", "layout=mirror")).sequential
    with pytest.raises(InputError, match=r"sweep\.disks.*raidz3 needs at least 4 disks, not 3"):
        scenario.load("resilver-sweep", ("sweep.disks=[3, 6]",))
    with pytest.raises(InputError, match=r"load_job.*\[section\]"):
        scenario.load("resilver-75pct", ('load_job="rw=randrw"',))


def test_draid_distributed_spares_are_checked_and_rebuild_onto_the_spare(tmp_path: Path) -> None:
    sc = scenario.load("resilver-draid", ())
    assert isinstance(sc, ZfsScenario)
    cell = next(sc.cells())
    assert cell.pool.distributed_spare and cell.pool.spare_name(0) == "draid1-0-0"
    assert "+1s" in cell.label()
    argv = pool.create_argv(cell.pool, ["/dev/a", "/dev/b", "/dev/c", "/dev/d", "/dev/e"])
    assert argv[argv.index("tank") + 1] == "draid1:1s"
    # No new disk is attached for the rebuild: the spare is space on the pool's own disks.
    disks = pool.make_disks(tmp_path, cell, sc.fault)
    assert disks.spares == () and len(disks.data) == 5
    with pytest.raises(InputError, match=r"draid_spares.*only dRAID"):
        scenario.load("resilver-75pct", ("draid_spares=1",))
    with pytest.raises(InputError, match=r"draid_spares.*2 lost disks need"):
        scenario.load("resilver-draid", ("fault.disks=[0, 1]",))
    with pytest.raises(InputError, match=r"draid_spares.*no room for data"):
        scenario.load("resilver-draid", ("disks=2",))
