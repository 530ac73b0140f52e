"""Recovery-time runs: bad input before any guest boots, e2fsck -tt parsing (fixtures in
tests/data/recovery/, see README there), the fits and claims, the recovery table over
stored observations, and (vm) one real crash of a tiny ext4 and ext2 end to end."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.check.timed import parse_e2fsck_tt
from harness.cli.lab import to_toml
from harness.config import scenario
from harness.errors import HarnessError, InputError
from harness.experiments import lifecycle
from harness.experiments.recovery.crash import replay_to_mark
from harness.experiments.recovery.experiment import Item, Recovery
from harness.experiments.recovery.settings import RecoveryScenario, preflight
from harness.image import build as image
from harness.model.contract import Stopped
from harness.outcome import Outcome
from harness.replay.replayer import image_digest
from harness.report import query
from harness.report.recovery import recovery_points
from harness.report.recovery_fit import claims, fits
from harness.store.db import RunKind, Store
from tests import guestcopy
from tests.synth import run_results_cli

DATA = Path(__file__).parent / "data" / "recovery"
LOGS = Path(__file__).parent / "data" / "logs"
GUEST = Path(__file__).parent.parent / "harness" / "guest"
TINY = (
    'filesystems=[{fs="ext2"}, {fs="ext4"}]',
    'sizes=["64M"]',
    "population.files=100",
    "population.dirs=5",
)


def load(*sets: str) -> RecoveryScenario:
    sc = scenario.load("recovery-vs-size", (*TINY, *sets))
    assert isinstance(sc, RecoveryScenario)
    return sc


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CRASHLAB_WORK", str(tmp_path))
    return tmp_path


def test_the_catalogue_scenarios_load() -> None:
    for name in ("recovery-vs-size", "fsck-features", "journal-size"):
        assert isinstance(scenario.load(name), RecoveryScenario)
    sc = scenario.load("fsck-features")
    assert isinstance(sc, RecoveryScenario)
    assert [c.name() for c in sc.filesystems][:3] == [
        "ext4 defaults",
        "ext4 ^flex_bg",
        "ext4 ^metadata_csum,^uninit_bg",
    ]
    assert sc.filesystems[1].mkfs_argv() == ["mkfs.ext4", "-F", "-q", "-O", "^flex_bg"]


def test_show_prints_toml_without_unset_values() -> None:
    cells = 'filesystems=[{fs="ext4"}, {fs="ext4", journal_size="4M"}]'
    sc = scenario.load("journal-size", (cells,))
    text = to_toml(sc.resolved())
    assert "None" not in text
    cells = tomllib.loads(text)["filesystems"]
    assert "journal_size" not in cells[0] and cells[1]["journal_size"] == 4 << 20


def test_each_crash_method_is_an_item_and_one_crash_measures_them_together() -> None:
    sc = load('crash.methods=["dm-log-writes", "sigkill", "sigkill"]')
    assert sc.crash.methods == ("sigkill", "dm-log-writes")  # each once, sigkill first
    exp = Recovery(SimpleNamespace(scenario=sc, progress=lambda *a: None))  # type: ignore[arg-type]
    exp.prepare()
    ids = [it.id for it in exp.items()]
    assert ids == [
        "ext2 defaults @64M #0", "ext2 defaults @64M #0 dm-log-writes",
        "ext4 defaults @64M #0", "ext4 defaults @64M #0 dm-log-writes",
    ]  # fmt: skip
    lw = exp.items()[1]
    assert lw.key()["method"] == "dm-log-writes"
    assert lw.key()["cell"] == "ext2 defaults (dm-log-writes)"  # its own line in fits, plots
    assert exp.items()[0].key()["cell"] == "ext2 defaults"
    groups: list[list[str]] = []

    def measure(group: Sequence[Item]) -> dict[str, dict[str, Any]]:
        groups.append([it.id for it in group])
        return {it.method: {"outcome": "consistent", "of": it.id} for it in group}

    exp.measure = measure  # type: ignore[method-assign]
    # a resumed run: the ext2 sigkill item is done, its dm-log-writes one is not
    got = [(it.id, r["of"]) for it, r in exp.check(exp.items()[1:])]
    assert groups == [ids[1:2], ids[2:4]]
    assert got == [(i, i) for i in ids[1:]]


def _stop(tmp_path: Path, timeout: int) -> list[str]:
    """``recoveryload.py stop`` from the guest's copy of the programs, as the guest runs it."""
    launcher = guestcopy.unpack(tmp_path / "g") / "recoveryload.py"
    return [sys.executable, "-I", str(launcher), "stop", "--timeout", str(timeout)]


def test_the_guest_program_stops_the_churn_and_waits_for_it(tmp_path: Path) -> None:
    """``recoveryload.py stop`` is stdlib only: it runs here as in the guest."""
    program = _stop(tmp_path, 20)
    child = subprocess.Popen(["sleep", "60"])
    reaper = threading.Thread(target=child.wait)  # in the guest, init reaps the churn
    reaper.start()
    out = subprocess.run([*program, "--pid", str(child.pid)], capture_output=True, check=True)
    reaper.join(5)
    said = Stopped.from_json(out.stdout.decode())
    assert (said.stopped, said.was_running) == (True, True)
    assert child.returncode == -9


def test_a_churn_that_outlives_sigkill_says_where_it_waits(tmp_path: Path) -> None:
    """Unreaped, the killed child stays a zombie, which ``kill(pid, 0)`` still finds:
    the stand-in for a task blocked in the kernel. The answer names its wait channel."""
    program = _stop(tmp_path, 1)
    child = subprocess.Popen(["sleep", "60"])
    try:
        out = subprocess.run([*program, "--pid", str(child.pid)], capture_output=True, check=True)
    finally:
        child.wait()
    said = Stopped.from_json(out.stdout.decode())
    assert (said.stopped, said.was_running) == (False, True)
    assert said.seconds >= 1
    assert "wchan: " in said.stuck and "stack: " in said.stuck, said.stuck


@pytest.fixture(scope="module")
def real_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/data/logs/ext4-ops-small (README there): a real dm-log-writes log."""
    out = tmp_path_factory.mktemp("lw") / "log.raw"
    with gzip.open(LOGS / "ext4-ops-small.log.gz", "rb") as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def test_a_log_replayed_to_a_mark_is_the_disk_at_that_mark(real_log: Path, tmp_path: Path) -> None:
    meta = json.loads((LOGS / "ext4-ops-small.json").read_text())
    image = tmp_path / "state.raw"
    # Nothing is written after the umount mark: the state there is the recorder's disk.
    got = replay_to_mark(real_log, image, meta["device_size"], "crashlab:umount")
    assert image_digest(image) == meta["dut_sha256"]
    assert got["writes"] == meta["stats"]["writes"]
    assert got["bytes_written"] == meta["stats"]["bytes_written"]
    assert (got["flushes"], got["fuas"]) == (meta["stats"]["flushes"], meta["stats"]["fuas"])
    early = replay_to_mark(real_log, image, meta["device_size"], "crashlab:sync:3")
    assert 0 < early["writes"] < got["writes"] and early["log_entries"] < got["log_entries"]
    assert image_digest(image) != meta["dut_sha256"]
    with pytest.raises(HarnessError, match="no 'crashlab:crash' mark") as e:
        replay_to_mark(real_log, image, meta["device_size"])
    assert "crashlab:mkfs" in (e.value.detail or "")


def test_an_unknown_feature_is_refused_by_mke2fs_before_any_guest(work: Path) -> None:
    sc = load('filesystems=[{fs="ext4", features=["^flex_bg", "bogus_feature"]}]')
    with pytest.raises(InputError) as e:
        preflight(sc)
    msg = e.value.message
    assert "recovery-vs-size.toml" in msg and "filesystems[0].features" in msg
    assert "bogus_feature" in msg
    # and the lifecycle runs it before it opens the store or looks for a guest image
    db = work / "lab.sqlite"
    with pytest.raises(InputError):
        lifecycle.execute(sc, db=db)
    assert not db.exists()


def test_a_journal_too_big_for_the_size_is_refused(work: Path) -> None:
    sc = load('filesystems=[{fs="ext4", journal_size="1G"}]')
    with pytest.raises(InputError, match=r"filesystems\[0\]\.journal_size.*too big"):
        preflight(sc)


def test_a_size_above_the_free_space_is_refused(work: Path) -> None:
    sc = load('sizes=["64M", "1000T"]')
    with pytest.raises(InputError, match=r"key 'sizes' = '1000T'.*free") as e:
        preflight(sc)
    assert e.value.hint and "CRASHLAB_WORK" in e.value.hint


def test_a_population_that_does_not_fit_is_refused() -> None:
    with pytest.raises(InputError, match=r"--set population\.files=3000: .*4096 inodes"):
        load("population.files=3000", "population.file_size=100")
    with pytest.raises(InputError, match=r"population.*more than 85%"):
        load('population.file_size="1M"', "population.files=60")
    with pytest.raises(InputError, match=r"population\.fill.*ext2 has no fallocate"):
        load("population.fill=10")
    with pytest.raises(InputError, match=r"filesystems\[0\]\.features.*xfs"):
        load('filesystems=[{fs="xfs", features=["^flex_bg"]}]')
    with pytest.raises(InputError, match=r"sizes.*below what mkfs.xfs accepts"):
        load('filesystems=[{fs="xfs"}]')


def test_e2fsck_tt_pass_times_and_counts() -> None:
    # tests/data/recovery/README.md says how each file was made
    clean = parse_e2fsck_tt((DATA / "e2fsck-tt-ext2-1G.txt").read_text())
    assert set(clean["passes"]) == {"1", "2", "3", "4", "5"}
    assert clean["inodes_checked"] == 11 and clean["inodes_total"] == 65536
    assert clean["blocks_total"] == 262144
    assert parse_e2fsck_tt("e2fsck: Bad magic number in super-block") == {}
    fixed = parse_e2fsck_tt((DATA / "e2fsck-fy-tt-ext4-crash-tail.txt").read_text())
    assert list(fixed["passes"]) == ["1", "2", "3A", "3", "4", "5"]
    assert fixed["e2fsck_seconds"] == pytest.approx(0.08)
    assert (fixed["inodes_checked"], fixed["blocks_used"]) == (2649, 9387)
    aborted = parse_e2fsck_tt((DATA / "e2fsck-fn-tt-ext2-crash-tail.txt").read_text())
    assert "1d" in aborted["passes"] and "e2fsck_seconds" not in aborted


def obs(cell: str, fs: str, size: float, phases: dict[str, float], inodes: int = 0,
        features: str = "defaults") -> dict[str, Any]:  # fmt: skip
    return {
        "item": f"{cell} @{size}",
        "cell": {"cell": cell, "fs": fs, "size": size, "features": features},
        "metrics": {"phases": phases, "population": {"inodes_total": inodes, "files": 100}},
        "outcome": "consistent",
    }


def test_fits_and_claims_are_computed_from_the_data() -> None:
    rows = [
        obs("ext2 defaults", "ext2", 1, {"repair": 1.5, "mount": 0.1}, 65536),
        obs("ext2 defaults", "ext2", 4, {"repair": 4.5, "mount": 0.1}, 262144),
        obs("ext4 defaults", "ext4", 1, {"mount": 0.2, "fsck": 0.4}, 65536),
        obs("ext4 defaults", "ext4", 4, {"mount": 0.3, "fsck": 0.8}, 262144),
        obs("ext4 ^flex_bg", "ext4", 4, {"fsck": 2.0}, 262144, "^flex_bg"),
    ]
    f = {(r["cell"], r["phase"]): r for r in fits(rows)}
    ext2 = f[("ext2 defaults", "repair")]
    assert ext2["s_per_gib"] == pytest.approx(1.0) and ext2["r2_size"] == pytest.approx(1.0)
    assert ext2["s_per_minodes"] == pytest.approx(3.0 / (196608 / 1e6), rel=1e-4)
    assert ("ext4 ^flex_bg", "fsck") not in f  # one size: no line to fit
    said = claims(rows)
    assert any("ext2 defaults: e2fsck -fy 1.500 s at 1G, 4.500 s at 4G (3.0x for 4x" in c
               for c in said)  # fmt: skip
    assert any("ext4 defaults: mount (kernel replay) 0.200 s at 1G, 0.300 s at 4G" in c
               for c in said)  # fmt: skip
    assert any("ext4 ^flex_bg took 2.000 s, 2.50x ext4 defaults (0.800 s)" in c for c in said)
    # JFS's recovery is its fsck's log replay (the kernel refuses a dirty volume)
    jfs = [obs("jfs defaults", "jfs", n, {"log_replay": 0.1 * n, "mount": 0.05}, 1) for n in (1, 4)]
    assert any("jfs defaults: log replay by its fsck, before mount 0.100 s at 1G, 0.400 s" in c
               for c in claims([*rows, *jfs]))  # fmt: skip
    assert ("jfs defaults", "log_replay") in {(r["cell"], r["phase"]) for r in fits(jfs)}
    # a feature set is compared with the defaults crashed the same way
    lw = obs("ext4 defaults (dm-log-writes)", "ext4", 4, {"fsck": 0.5}, 262144)
    lw["cell"]["method"] = "dm-log-writes"
    lw_flex = obs("ext4 ^flex_bg (dm-log-writes)", "ext4", 4, {"fsck": 1.0}, 262144, "^flex_bg")
    lw_flex["cell"]["method"] = "dm-log-writes"
    said = [c for c in claims([*rows, lw, lw_flex]) if c.startswith("seed 004")]
    assert len(said) == 2
    assert any("ext4 ^flex_bg took 2.000 s, 2.50x ext4 defaults (0.800 s)" in c for c in said)
    # JFS's recovery is its fsck's log replay (the kernel refuses a dirty volume)
    jfs = [obs("jfs defaults", "jfs", n, {"log_replay": 0.1 * n, "mount": 0.05}, 1) for n in (1, 4)]
    assert any("jfs defaults: log replay by its fsck, before mount 0.100 s at 1G, 0.400 s" in c
               for c in claims([*rows, *jfs]))  # fmt: skip
    assert ("jfs defaults", "log_replay") in {(r["cell"], r["phase"]) for r in fits(jfs)}
    assert any("ext4 ^flex_bg (dm-log-writes) took 1.000 s, 2.00x ext4 defaults (dm-log-writes)"
               in c for c in said)  # fmt: skip


def store_with_recovery_runs(db: Path) -> None:
    with Store.open(db) as st:
        run = st.begin_run("fsck-features", RunKind.RECOVERY, {"kind": "recovery"}, 1)
        for i, (cell, fs, size, fsck) in enumerate([
            ("ext4 defaults", "ext4", 1.0, 0.5), ("ext4 defaults", "ext4", 1.0, 0.7),
            ("ext4 ^flex_bg", "ext4", 1.0, 0.9), ("xfs defaults", "xfs", 4.0, 0.3),
            ("xfs defaults", "xfs", 1.0, 0.2),
        ]):  # fmt: skip
            o = obs(cell, fs, size, {"fsck": fsck, "mount": 0.1})
            o["cell"]["features"] = cell.split(" ", 1)[1]
            st.record_observation(run, f"{cell}#{i}", o["cell"], o["metrics"], Outcome.CONSISTENT)


def test_the_recovery_table_groups_observations_by_fs_features_size(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    store_with_recovery_runs(db)
    with Store.open(db) as st:
        t = query.grouped(st, "recovery", ["fs", "features", "size"])
        by_files = query.grouped(st, "recovery", ["files"])
    keys = [g.key for g in t.groups]
    assert keys == [
        ("ext4", "^flex_bg", 1.0),
        ("ext4", "defaults", 1.0),
        ("xfs", "defaults", 1.0),
        ("xfs", "defaults", 4.0),
    ]
    defaults = t.groups[1]
    assert defaults.stats["fsck"].n == 2 and defaults.stats["fsck"].mean == pytest.approx(0.6)
    assert defaults.counts == {"consistent": 2}
    assert [g.key for g in by_files.groups] == [(100,)]
    with Store.open(db) as st:
        by_method = query.grouped(st, "recovery", ["method"])
    assert [g.key for g in by_method.groups] == [("sigkill",)]  # stored before methods


def test_the_plot_against_size_through_the_cli(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    out = tmp_path / "recovery.png"
    argv = ["results", "plot", "recovery-vs-size", "--db", str(db), "-o", str(out)]
    with Store.open(db):
        pass
    assert run_results_cli(argv) == 0 and not out.exists()  # nothing stored: no chart
    store_with_recovery_runs(db)
    assert run_results_cli(argv) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    with Store.open(db) as st:
        points = recovery_points(st)
    assert points["fsck"]["xfs defaults"] == {1.0: [0.2], 4.0: [0.3]}
    assert points["fsck"]["ext4 defaults"] == {1.0: [0.5, 0.7]}


@pytest.mark.vm
def test_a_real_crash_of_tiny_ext4_and_ext2(guest_image: image.Image, tmp_path: Path) -> None:
    sc = scenario.load(
        "recovery-vs-size",
        ('filesystems=[{fs="ext4"}, {fs="ext2"}]', 'sizes=["256M"]', "population.files=300",
         "population.dirs=10", "crash.after=2", 'crash.methods=["sigkill", "dm-log-writes"]'),
    )  # fmt: skip
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    assert isinstance(r.experiment, Recovery)
    with Store.open(db, create=False) as st:
        rows = {o["item"]: o for o in st.observations(r.run_id)}
        t = query.grouped(st, "recovery", ["fs", "features", "size"])
        by_method = query.grouped(st, "recovery", ["fs", "method"])
    assert set(rows) == {
        "ext4 defaults @256M #0", "ext2 defaults @256M #0",
        "ext4 defaults @256M #0 dm-log-writes", "ext2 defaults @256M #0 dm-log-writes",
    }  # fmt: skip
    for o in rows.values():
        m = o["metrics"]
        assert o["outcome"] not in ("harness_error", "timeout", "panic"), m.get("error")
        if o["cell"]["method"] == "sigkill":
            assert m["crash"]["killed"] == "SIGKILL"
        else:  # the log replayed to the mark taken while the churn ran
            assert m["crash"]["mark"] == "crashlab:crash" and m["crash"]["writes"] > 0
        assert m["population"]["files"] == 300 and m["population"]["inodes_used"] >= 310
        assert {"mount", "fsck", "repair"} <= set(m["phases"])
        assert {"1", "2", "3", "4", "5"} <= set(m["repair"]["passes"])  # -fy may add 3A
        assert m["repair"]["inodes_total"] == 65536  # -fn on ext2 may abort before its counts
    for item in ("ext4 defaults @256M #0", "ext4 defaults @256M #0 dm-log-writes"):
        ext4 = rows[item]["metrics"]
        # the crash left a journal to replay: the kernel said so when mounting
        assert any("recovery" in line for line in ext4["replay"]["kernel_log"]), ext4["replay"]
    assert [g.key for g in t.groups] == [("ext2", "defaults", 0.25), ("ext4", "defaults", 0.25)]
    assert [g.key for g in by_method.groups] == [
        ("ext2", "dm-log-writes"), ("ext2", "sigkill"),
        ("ext4", "dm-log-writes"), ("ext4", "sigkill"),
    ]  # fmt: skip


@pytest.mark.vm
def test_a_crashed_jfs_volume_is_mounted_after_its_log_replay(
    guest_image: image.Image, tmp_path: Path
) -> None:
    """JFS's kernel refuses to mount a volume a crash left dirty ("File System Dirty"):
    its recovery is fsck.jfs's log replay, as at boot, then the mount. A state cut at a
    mark and a SIGKILL state (QEMU killed mid-churn) both replay and mount."""
    sc = scenario.load(
        "recovery-vs-size",
        ('filesystems=[{fs="jfs"}]', 'sizes=["64M"]', "population.files=200",
         "population.dirs=5", "crash.after=2", 'crash.methods=["sigkill", "dm-log-writes"]'),
    )  # fmt: skip
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    with Store.open(db, create=False) as st:
        rows = {o["cell"]["method"]: o for o in st.observations(r.run_id)}
    for o in rows.values():
        # A harness failure (hang, panic) is no answer about JFS: say which it was.
        assert "replay" in o["metrics"], {
            k: o["metrics"].get(k) for k in ("outcome", "error", "detail", "console")
        }
        before = o["metrics"]["replay"]["before_mount"]
        assert before["argv"][:2] == ["fsck.jfs", "--replay_journal_only"], before
        assert "log_replay" in o["metrics"]["phases"]
    marked = rows["dm-log-writes"]
    assert marked["outcome"] == "consistent", marked["metrics"]["replay"]
    assert "mount" in marked["metrics"]["phases"]
    # The guest's fsck.jfs is the image's build (images/jfsutils): Debian 12's failed this
    # replay every time (docs/findings/jfs-logredo-after-sigkill.md).
    killed = rows["sigkill"]
    assert "logredo failed" not in killed["metrics"]["replay"]["before_mount"]["output"]
    assert killed["outcome"] == "consistent", killed["metrics"]
