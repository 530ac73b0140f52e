"""Scenario loading, validation, --set overrides and the list/show commands."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from harness import paths
from harness.cli import lab as cli_lab
from harness.config import scenario, workloads
from harness.config.crash import DataMode, FsType
from harness.config.workloads import FioWorkload, OpsWorkload
from harness.errors import InputError
from harness.experiments.zfs.settings import ZfsScenario

SHIPPED = scenario.names(paths.REPO / "scenarios")

MINIMAL = """
description = "test"
[fs]
type = "ext4"
disk_size = "64M"
"""


@pytest.fixture
def sdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "scenarios"
    d.mkdir()
    monkeypatch.setenv("CRASHLAB_SCENARIOS", str(d))
    return d


def write(d: Path, name: str, text: str) -> Path:
    p = d / f"{name}.toml"
    p.write_text(text)
    return p


def error_of(d: Path, text: str, overrides: tuple[str, ...] = ()) -> InputError:
    p = write(d, "t", text)
    with pytest.raises(InputError) as e:
        scenario.load(p, overrides)
    return e.value


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_loads(name: str) -> None:
    s = scenario.load(name)
    assert s.name == name and s.description
    json.dumps(s.resolved())
    if not isinstance(s, scenario.Scenario):
        return  # ZFS scenarios: tests/test_zfs*.py check their shape
    if name.endswith("-large"):
        base = scenario.load(name.removesuffix("-large"))
        assert s.fs.type == base.fs.type and s.fs.data_mode == base.fs.data_mode
        assert s.fs.disk_size >= 1 << 30
    elif name == "fsstress-482":  # generic/482's procedure: every FUA of the log
        assert s.crash.max_states >= 10_000 and s.fs.disk_size == 200 << 20
    else:
        assert s.crash.max_states <= 40 and s.fs.disk_size <= 320 << 20
        if isinstance(s.workload, OpsWorkload) and s.expect is None:  # controls are smaller
            assert 100 <= s.workload.ops <= 300


def test_required_catalogue_is_shipped() -> None:
    for name in (
        "ext4-ordered-fsync",
        "ext4-journal-fsync",
        "ext4-writeback-fsync",
        "xfs-fsync",
        "btrfs-fsync",
        "ext2-fsync",
        "ext3-ordered-fsync",
        "ext4-fio",
    ):
        assert name in SHIPPED and f"{name}-large" in SHIPPED


def test_minimal_scenario_fills_defaults(sdir: Path) -> None:
    s = scenario.load(write(sdir, "mini", MINIMAL))
    assert s.fs.data_mode is DataMode.ORDERED
    assert s.fs.all_mount_options() == ("data=ordered",)
    assert s.workload == OpsWorkload(
        ops=workloads.DEFAULT_OPS,
        files=workloads.DEFAULT_FILES,
        max_size=256 << 10,
        fsync_names=True,
    )
    assert [st.kind for st in s.crash.states] == ["fua"]
    r = s.resolved()
    assert r["fs"]["disk_size"] == 64 << 20 and r["check"]["guest_batch"] == 20
    assert r["recorder"] == {"type": "dm-log-writes"}


def test_broken_toml_names_the_file(sdir: Path) -> None:
    e = error_of(sdir, "description = \n")
    assert "t.toml" in e.message and "not valid TOML" in e.message


def test_unknown_key_has_closest_hint(sdir: Path) -> None:
    e = error_of(sdir, MINIMAL + "mount_option = ['noatime']\n")
    assert "t.toml" in e.message and "'fs.mount_option'" in e.message
    assert e.hint is not None and "mount_options" in e.hint


def test_bad_value_type(sdir: Path) -> None:
    e = error_of(sdir, MINIMAL + "[workload]\nops = 'many'\n")
    assert "t.toml" in e.message and "'workload.ops'" in e.message and "'many'" in e.message


def test_data_mode_is_for_ext3_and_ext4_only(sdir: Path) -> None:
    e = error_of(
        sdir, 'description = "x"\n[fs]\ntype = "xfs"\ndisk_size = "512M"\ndata_mode = "journal"\n'
    )
    assert "t.toml" in e.message and "'fs.data_mode'" in e.message and "'journal'" in e.message


def test_bad_data_mode_value(sdir: Path) -> None:
    e = error_of(sdir, MINIMAL + 'data_mode = "orderd"\n')
    assert "'fs.data_mode' = 'orderd'" in e.message and e.hint == "did you mean 'ordered'?"


def test_xfs_disk_too_small(sdir: Path) -> None:
    e = error_of(sdir, 'description = "x"\n[fs]\ntype = "xfs"\ndisk_size = "256M"\n')
    assert "t.toml" in e.message and "'fs.disk_size' = '256M'" in e.message and "300M" in e.message


def test_bad_size_and_state_kind_and_params(sdir: Path) -> None:
    assert "'fs.disk_size' = 'lots'" in error_of(sdir, MINIMAL.replace('"64M"', '"lots"')).message
    e = error_of(sdir, MINIMAL + '[crash]\nstates = [{kind = "fau"}]\n')
    assert "'crash.states[0].kind' = 'fau'" in e.message and e.hint == "did you mean 'fua'?"
    e = error_of(sdir, MINIMAL + '[crash]\nstates = [{kind = "every"}]\n')
    assert "crash.states[0].n" in e.message
    e = error_of(sdir, MINIMAL + '[crash]\nstates = [{kind = "fua", n = 3}]\n')
    assert "unknown key 'crash.states[0].n'" in e.message
    e = error_of(sdir, MINIMAL + '[crash]\nstates = [{kind = "percent", at = [50, 150]}]\n')
    assert "crash.states[0].at" in e.message


def test_state_params(sdir: Path) -> None:
    s = scenario.load(
        write(
            sdir,
            "st",
            MINIMAL
            + """[crash]
states = [{kind = "every", n = 100}, {kind = "percent", at = [10, 50.5]}, {kind = "reorder"},
          {kind = "torn"}, {kind = "flush"}]
""",
        )
    )
    assert [st.params() for st in s.crash.states] == [
        {"n": 100},
        {"at": [10.0, 50.5]},
        {"max_states": 64, "per_point": 16},  # the generator's own defaults (issue 8)
        {"max_states": 64, "modes": ["first-sector", "half", "blocks"], "only": []},
        {},
    ]


def test_workload_keys_follow_the_type(sdir: Path) -> None:
    e = error_of(sdir, MINIMAL + '[workload]\ntype = "fio"\nops = 5\njob = "[a]"\n')
    assert "'workload.ops'" in e.message
    e = error_of(sdir, MINIMAL + '[workload]\ntype = "fio"\n')
    assert "workload.job" in e.message
    s = scenario.load(
        write(sdir, "f", MINIMAL + '[workload]\ntype = "fio"\njob = "[j]\\nrw=write"\n')
    )
    assert isinstance(s.workload, FioWorkload)


def test_workload_must_fit_the_disk(sdir: Path) -> None:
    e = error_of(sdir, MINIMAL + '[workload]\nfiles = 64\nmax_size = "1M"\n')
    assert "'workload.max_size'" in e.message


def test_name_must_match_file(sdir: Path) -> None:
    assert "'name' = 'other'" in error_of(sdir, 'name = "other"\n' + MINIMAL).message


def test_unknown_scenario_lists_close_names(sdir: Path) -> None:
    write(sdir, "ext4-ordered-fsync", MINIMAL)
    with pytest.raises(InputError) as e:
        scenario.load("ext4-orderd-fsync")
    assert "unknown scenario 'ext4-orderd-fsync'" in e.value.message
    assert e.value.hint is not None and "'ext4-ordered-fsync'" in e.value.hint


def test_extends_merges_tables(sdir: Path) -> None:
    write(sdir, "base", MINIMAL + "[workload]\nops = 10\nfiles = 3\n")
    s = scenario.load(
        write(sdir, "big", 'extends = "base"\n[fs]\ndisk_size = "1G"\n[workload]\nops = 99\n')
    )
    assert s.fs.type is FsType.EXT4 and s.fs.disk_size == 1 << 30
    assert isinstance(s.workload, OpsWorkload) and (s.workload.ops, s.workload.files) == (99, 3)
    assert s.extends == ("base",) and s.description == "test"


def test_extends_errors(sdir: Path) -> None:
    write(sdir, "base", MINIMAL)
    e = error_of(sdir, 'extends = "bse"\n')
    assert "'extends' = 'bse'" in e.message and e.hint == "did you mean 'base'?"
    write(sdir, "a", 'extends = "b"\n')
    write(sdir, "b", 'extends = "a"\n')
    with pytest.raises(InputError, match="loop"):
        scenario.load("a")


def test_set_overrides_are_typed_and_validated(sdir: Path) -> None:
    p = write(sdir, "s", MINIMAL)
    s = scenario.load(
        p,
        [
            "fs.type=xfs",
            "disk_size=512M",
            "workload.ops=50",
            "check.host=false",
            "fs.mount_options=noatime,nodiscard",
            'crash.states=[{kind="every", n=7}]',
        ],
    )
    assert s.fs.type is FsType.XFS and s.fs.data_mode is None and s.fs.disk_size == 512 << 20
    assert isinstance(s.workload, OpsWorkload) and s.workload.ops == 50
    assert s.check.host is False and s.fs.mount_options == ("noatime", "nodiscard")
    assert s.crash.states[0].params() == {"n": 7}
    assert s.resolved()["overrides"][0] == "fs.type=xfs"
    # A string field takes its text as typed, or a quoted TOML string's meaning: the one
    # way to give a multi-line value (a fio job) on the command line.
    zfs = paths.REPO / "scenarios" / "resilver-75pct.toml"
    z = scenario.load(zfs, ('load_job="[load]\\nrw=randrw\\n"',))
    assert isinstance(z, ZfsScenario) and z.load_job == "[load]\nrw=randrw\n"
    assert scenario.load(zfs, ("description=a 0x10 b",)).description == "a 0x10 b"
    # Same validation as in the file: xfs needs 300M.
    msg = error_of(sdir, MINIMAL, ("fs.type=xfs", "disk_size=256M")).message
    assert "--set fs.disk_size='256M': xfs needs a disk of at least 300M" in msg


@pytest.mark.parametrize(
    ("item", "expect"),
    [
        ("workload.ops=lots", "--set workload.ops='lots': expected an integer"),
        ("fs.typo=ext4", "unknown key 'fs.typo'"),
        ("type=ext4", "ambiguous"),
        ("noequals", "expected KEY=VALUE"),
        ("check.guest=maybe", "expected true or false"),
        ("crash.states=[{kind=", "not a TOML value"),
    ],
)
def test_bad_set(sdir: Path, item: str, expect: str) -> None:
    e = error_of(sdir, MINIMAL, (item,))
    assert "t.toml" in e.message and expect in e.message


def test_unknown_set_key_hint(sdir: Path) -> None:
    e = error_of(sdir, MINIMAL, ("fs.disk_sise=1G",))
    assert (
        e.hint is not None and "did you mean 'fs.disk_size'?" in e.hint and "valid keys:" in e.hint
    )


def test_survey_reports_broken_files(sdir: Path) -> None:
    write(sdir, "good", MINIMAL)
    write(sdir, "bad", "bogus = 1\n" + MINIMAL)
    good, bad = scenario.survey()
    assert [s.name for s in good] == ["good"] and [s.name for s in scenario.catalogue()] == ["good"]
    assert len(bad) == 1 and bad[0].name == "bad" and "'bogus'" in bad[0].error


# The CLI: through harness.cli.main when it imports, else through our own register().


def run_cli(argv: list[str]) -> int:
    try:
        from harness.cli import main as cli
    except Exception:  # the shared CLI is edited concurrently; ours must still be tested
        return run_own_parser(argv)
    return cli.main(argv)


def run_own_parser(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    cli_lab.register(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    try:
        status: int = args.func(args)
    except InputError as e:
        return e.exit_status
    return status


def test_own_parser_without_shared_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_own_parser(["show", "ext4-ordered-fsync", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fs"]["data_mode"] == "ordered"
    assert run_own_parser(["show", "nope"]) == 2


def test_cli_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["list"]) == 0
    out = capsys.readouterr().out
    assert "ext4-ordered-fsync" in out and "xfs-fsync-large" in out
    assert run_cli(["show", "xfs-fsync", "--set", "workload.ops=120", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workload"]["ops"] == 120 and data["fs"]["type"] == "xfs"
    assert run_cli(["show", "ext4-fio"]) == 0
    text = capsys.readouterr().out
    import tomllib

    assert tomllib.loads(text)["workload"]["job"].startswith("[global]")


def test_cli_errors_exit_2_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["show", "no-such-scenario"]) == 2
    assert run_cli(["show", "xfs-fsync", "--set", "disk_size=100M"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err


def test_cli_list_flags_broken_files(sdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(sdir, "good", MINIMAL)
    write(sdir, "bad", "not toml [")
    assert run_cli(["list"]) == 2
    out = capsys.readouterr().out
    assert "good" in out and "bad" in out and "error" in out


def test_ext4_without_a_journal_has_no_data_mode() -> None:
    """ext4 refuses any data= on a filesystem made without a journal ("can't mount with
    data=, fs mounted w/o journal"): the lab must not pass one."""
    sc = scenario.load("ext4-nojournal-fsync")
    assert sc.fs.data_mode is None and not sc.fs.journaled  # type: ignore[union-attr]
    assert sc.fs.mount_argv("/dev/x", "/mnt") == ["mount", "-t", "ext4", "/dev/x", "/mnt"]  # type: ignore[union-attr]
    # Removing the journal of an ordered-mode scenario drops the mode it can't have ...
    sc = scenario.load("ext4-ordered-fsync", ('fs.mkfs_options=["-O", "^has_journal"]',))
    assert sc.fs.data_mode is None  # type: ignore[union-attr]
    # ... and asking for both is bad input.
    with pytest.raises(InputError, match="with a journal have data modes"):
        scenario.load(
            "ext4-ordered-fsync",
            ('fs.mkfs_options=["-O", "^has_journal"]', "fs.data_mode=ordered"),
        )


def test_a_toml_outside_the_scenarios_folder_extends_a_shipped_one(
    sdir: Path, tmp_path: Path
) -> None:
    """A user's own file in any folder extends a lab scenario by name (it said "no such
    scenario" unless the parent sat beside it); a sibling of that name still comes first."""
    write(sdir, "base", MINIMAL + "[workload]\nops = 10\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    s = scenario.load(write(mine, "big", 'extends = "base"\n[workload]\nops = 99\n'))
    assert s.extends == ("base",) and isinstance(s.workload, OpsWorkload)
    assert s.workload.ops == 99
    write(mine, "base", MINIMAL + "[workload]\nops = 10\nfiles = 7\n")
    s = scenario.load(mine / "big.toml")
    assert isinstance(s.workload, OpsWorkload) and s.workload.files == 7
