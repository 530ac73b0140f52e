"""fsync-eio: the verdict from a probe's facts, the scenario's bad input, and (vm) the
probe on real filesystems over dm-flakey."""

from __future__ import annotations

from pathlib import Path

import pytest

from faults.dm import FlakeyFault, FlakeyMode, healthy_table_args
from harness.config import scenario
from harness.errors import InputError
from harness.experiments import lifecycle
from harness.experiments.faults.experiment import FsyncEio, eio_args, judge
from harness.experiments.faults.settings import FaultsScenario
from harness.image import build as image
from harness.model.contract import EioFacts, ProbeStep
from harness.store.db import Store


def facts(*, errnos: tuple[int, int, int], after: str) -> EioFacts:
    steps = [ProbeStep(step=n, rc=0) for n in ("dm-create", "mkfs", "mount")]
    for name, e in zip(("fsync-1", "fsync-2", "reopen-fsync"), errnos, strict=True):
        steps.append(ProbeStep(step=name, errno=e, error="EIO" if e else ""))
    steps.append(ProbeStep(step="read-after-remount", errno=0, value=after))
    return EioFacts(steps=steps, kernel_log=["EXT4-fs (dm-0): Remounting filesystem read-only"])


def test_an_error_reported_once_then_forgotten_is_a_fact_not_a_finding() -> None:
    r = judge(facts(errnos=(5, 0, 0), after="old"))
    assert r["outcome"] == "consistent" and r["row"]["fsync-1"] == "EIO"
    assert r["row"]["fsync-2"] == "0" and r["row"]["kernel"] == "remount-ro"


def test_data_gone_without_any_error_is_data_loss() -> None:
    assert judge(facts(errnos=(0, 0, 0), after="old"))["outcome"] == "data_loss"
    assert judge(facts(errnos=(0, 0, 0), after="new"))["outcome"] == "consistent"


def test_a_blocked_fsync_is_reported_not_judged() -> None:
    f = facts(errnos=(5, 0, 0), after="old")
    f.steps[3] = ProbeStep(step="fsync-1", errno=None, error="blocked")
    r = judge(f)
    assert r["outcome"] == "skipped" and r["row"]["fsync-1"] == "blocked"


def test_flakey_tables() -> None:
    assert healthy_table_args("/dev/vdb") == ["/dev/vdb", "0", "86400", "0"]
    assert FlakeyFault(FlakeyMode.ERROR_WRITES).table_args("/dev/vdb") == [
        "/dev/vdb", "0", "0", "86400", "1", "error_writes",
    ]  # fmt: skip
    corrupt = FlakeyFault(FlakeyMode.CORRUPT, nth=32, direction="w", value=1, flags=("meta",))
    assert corrupt.features() == ["5", "corrupt_bio_byte", "32", "w", "1", str(1 << 12)]
    flappy = scenario.load("fsync-eio", ("fault.up=2", "fault.down=1"))
    assert isinstance(flappy, FaultsScenario)
    flapping = flappy.fault.fault()
    assert flapping.table_args("/dev/vdb")[2:4] == ["2", "1"]
    assert flapping.to_dict() == {"kind": "flakey", "mode": "error_writes", "up": 2, "down": 1}
    # The guest probe is told, so it can put fsync-1 in a down window and fsync-2 after.
    args = eio_args(flappy.filesystems[0], flappy, "/dev/vdb")
    assert args[args.index("--flap") + 1] == "2,1"


def test_an_interval_needs_both_halves_and_fsync_eio() -> None:
    with pytest.raises(InputError, match=r"fault\.down") as e:
        scenario.load("fsync-eio", ("fault.up=2",))
    assert "neither" in (e.value.hint or "")
    with pytest.raises(InputError, match=r"fault\.up.*fsync-eio"):
        scenario.load("flakey-drop-remount", ("fault.up=2", "fault.down=1"))


def test_bad_fault_mode_is_input_error() -> None:
    with pytest.raises(InputError, match=r"fault\.mode"):
        scenario.load("fsync-eio", ("fault.mode=error_reads",))
    with pytest.raises(InputError, match=r"filesystems\[0\]\.type") as e:
        scenario.load("fsync-eio", ('filesystems=[{type="btrf"}]',))
    assert e.value.hint == "did you mean 'btrfs'?"


@pytest.mark.vm
def test_fsync_eio_on_real_filesystems(guest_image: image.Image, tmp_path: Path) -> None:
    sc = scenario.load(
        "fsync-eio",
        ('filesystems=[{type="ext4", mount_options=["errors=continue"]}, {type="xfs"}]',),
    )
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    assert isinstance(r.experiment, FsyncEio) and r.status == 0
    with Store.open(db, create=False) as st:
        rows = {o["item"]: o["metrics"]["row"] for o in st.observations(r.run_id)}
        run = st.run(r.run_id)
    assert run.accelerator in ("kvm", "tcg") and run.guest_kernel  # what measured it
    assert set(rows) == {"ext4 errors=continue", "xfs"}
    for row in rows.values():
        assert row["fsync-1"] == "EIO"  # both report the failed writeback at least once
        assert row["after remount"] in ("old", "new")
    assert "shutdown" in rows["xfs"]["kernel"]


@pytest.mark.vm
def test_dust_scrub_repairs_the_mirror_and_ext4_reports_eio(
    guest_image: image.Image, tmp_path: Path
) -> None:
    sc = scenario.load("dust-scrub", ("data_mb=16", "bad_blocks=32"))
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    assert r.status == 0
    with Store.open(db, create=False) as st:
        rows = {o["item"]: o["metrics"]["row"] for o in st.observations(r.run_id)}
    zfs, ext4 = rows["zfs mirror"], rows["ext4"]
    assert zfs["data intact"] is True and zfs["data errors"] == 0
    assert zfs["read errors"] + zfs["cksum errors"] > 0 and zfs["repaired bytes"] > 0
    assert ext4["read"] == "EIO"


def test_a_bad_disk_outside_the_pool_is_input_error() -> None:
    with pytest.raises(InputError, match=r"bad_disk.*no disk 2") as e:
        scenario.load("dust-scrub", ("bad_disk=2",))
    assert e.value.hint == "set bad_disk to 0..1"
    assert scenario.load("dust-scrub-raidz", ()).pool_disks == 3


@pytest.mark.vm
def test_dust_scrub_rebuilds_a_raidz_disk_from_parity(
    guest_image: image.Image, tmp_path: Path
) -> None:
    sc = scenario.load("dust-scrub-raidz", ("data_mb=16", "bad_blocks=32"))
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    with Store.open(db, create=False) as st:
        (o,) = st.observations(r.run_id)
    row = o["metrics"]["row"]
    assert row["data intact"] is True and row["data errors"] == 0, row
    assert row["read errors"] + row["cksum errors"] > 0 and row["repaired bytes"] > 0, row
    assert o["metrics"]["seconds"] > 0 and r.status == 0
