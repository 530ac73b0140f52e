"""``scenario check-log``: a dm-log-writes log recorded elsewhere, on the recorded fixture
(tests/data/logs/README.md) -- the flags, where states start, bad input, and a host-only
run stored like any crash run. The guest run is in test_check_log_vm.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness import tools
from harness.cli import checklog
from harness.cli.main import build_parser, main
from harness.errors import InputError
from harness.experiments import lifecycle
from harness.experiments.checklog import source
from harness.outcome import Outcome
from harness.record.logwrites import Log
from harness.replay import crashstates
from harness.store.db import Store
from harness.vm import backend

LOGS = Path(__file__).parent / "data" / "logs"
MKFS, SYNC3, ENTRIES = 86, 127, 183  # the fixture's crashlab:mkfs, crashlab:sync:3, size
FIXTURE = ["--fs", "ext4", "--device-size", "32M", "--mkfs-options", "-J size=1"]


@pytest.fixture()
def log_path(ext4_small: tuple[Path, dict[str, Any]]) -> Path:
    return ext4_small[0]


@pytest.fixture()
def log(ext4_small_log: Log) -> Log:
    return ext4_small_log


def args(*argv: str | Path) -> Any:
    return build_parser().parse_args(["check-log", *map(str, argv)])


def test_flags_become_a_check_log_scenario(log_path: Path) -> None:
    sc = checklog.build(
        args(
            log_path,
            *FIXTURE,
            "--mount-options",
            "data=journal,noinit_itable",
            "--states",
            "fua,mark",
            "--after-mark",
            "crashlab:sync:3",
            "--set",
            "check.guest_batch=4",
        )
    )
    assert sc.kind == "check-log" and sc.name.startswith("check-log-96da8a6e9762")
    assert sc.fs.disk_size == 32 << 20 and sc.fs.mkfs_options == ("-J", "size=1")
    # fstests users write the data mode as a mount option; the lab keeps it apart.
    assert str(sc.fs.data_mode) == "journal" and sc.fs.mount_options == ("noinit_itable",)
    assert [str(s.kind) for s in sc.crash.states] == ["fua", "mark"]
    assert sc.after_mark == "crashlab:sync:3" and sc.after_entry is None
    assert sc.check.guest and sc.check.guest_batch == 4 and sc.oracle is None


def test_a_mark_and_an_entry_together_are_refused(log_path: Path) -> None:
    with pytest.raises(SystemExit) as e:
        args(log_path, *FIXTURE, "--after-mark", "mkfs", "--after-entry", "3")
    assert e.value.code == 2


def test_states_start_after_the_first_mark_and_the_run_says_so(log: Log) -> None:
    start = source.resolve_start(log, None, None)
    assert start.entry == MKFS
    assert "first mark 'crashlab:mkfs' (entry 86)" in start.says
    assert "neither --after-mark nor --after-entry" in start.says


def test_states_start_after_the_mark_or_entry_given(log: Log) -> None:
    assert source.resolve_start(log, "crashlab:sync:3", None).entry == SYNC3
    assert source.resolve_start(log, None, 100).entry == 100
    states = crashstates.generate(log, [{"kind": "fua"}], start=SYNC3)
    everything = crashstates.generate(log, [{"kind": "fua"}])
    assert states and all(s.prefix > SYNC3 + 1 for s in states)
    assert {s.id for s in states} < {s.id for s in everything}
    # A state's mark is the log's own text (sync:4 is the entry right after sync:3).
    assert states[0].mark == "crashlab:sync:4"
    # An entry start before the lab's mark: states the lab's own default never makes.
    early = crashstates.generate(log, [{"kind": "flush"}], start=10)
    assert min(s.prefix for s in early) < MKFS


def test_a_mark_not_in_the_log_lists_the_marks_it_has(log: Log) -> None:
    with pytest.raises(InputError) as e:
        source.resolve_start(log, "mkfs", None)
    assert "--after-mark 'mkfs'" in e.value.message and str(log.path) in e.value.message
    assert "'crashlab:mkfs' (entry 86)" in (e.value.hint or "")
    assert "'dm-log-writes-end' (entry 182)" in (e.value.hint or "")


def test_an_entry_past_the_end_names_the_log_size(log: Log) -> None:
    with pytest.raises(InputError, match=r"--after-entry 183: the log has 183 entries"):
        source.resolve_start(log, None, ENTRIES)


def test_a_device_too_small_names_the_entry_and_the_size(log: Log) -> None:
    source.require_fits(log, 32 << 20)
    with pytest.raises(InputError) as e:
        source.require_fits(log, 16 << 20)
    assert "entry 3 reaches byte 33554432" in e.value.message
    assert "16M (16777216 bytes)" in e.value.message and "32M" in (e.value.hint or "")


def test_bad_input_exits_2_without_a_traceback(
    log_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = tmp_path / "cut.log"
    cut.write_bytes(log_path.read_bytes()[:100_000])
    bad_oracle = tmp_path / "oracle.json"
    bad_oracle.write_text("{not json")
    db = ["--db", str(tmp_path / "lab.sqlite")]
    cases = {
        "entry 7 at byte offset 73728": [cut, *FIXTURE],
        "no such mark": [log_path, *FIXTURE, "--after-mark", "mkfs"],
        "entry 3 reaches byte": [log_path, "--fs", "ext4", "--device-size", "16M"],
        "not JSON": [log_path, *FIXTURE, "--oracle", bad_oracle],
        # The fixture's oracle predates the guest verifier's format: refused up front.
        "format 'crashlab-oracle/1', not 'crashlab-oracle/2'": [
            log_path,
            *FIXTURE,
            "--oracle",
            LOGS / "ext4-ops-small.oracle.json",
        ],
        "'fs.disk_size'": [log_path, "--fs", "ext4", "--device-size", "lots"],
    }
    for want, argv in cases.items():
        assert main(["check-log", *map(str, argv), "--host-only", *db]) == 2, want
        err = capsys.readouterr().err
        assert want in " ".join(err.split()) and "Traceback" not in err, err
    assert not (tmp_path / "lab.sqlite").exists()  # found before a run row was written


def test_a_host_only_run_is_stored_like_any_crash_run(
    log_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not tools.available("e2fsck"):
        pytest.skip("e2fsprogs not installed")
    monkeypatch.setenv("CRASHLAB_WORK", str(tmp_path / "work"))
    img = SimpleNamespace(hash="img", manifest={})
    monkeypatch.setattr(lifecycle, "require_image", lambda: img)
    sc = checklog.build(args(log_path, *FIXTURE, "--host-only"))
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    # generic/482's recipe on the fixture: every FUA after mkfs, all recover cleanly.
    assert r.status == 0 and r.items == 18 and dict(r.counts) == {"consistent": 18}
    assert "first mark 'crashlab:mkfs'" in r.summary["start"]
    assert "host checker only" in (r.experiment.caveat() or "")
    with Store.open(db, create=False) as st:
        detail = st.run_detail(r.run_id)
    assert detail.run.kind == "crash" and detail.run.scenario == sc.name
    assert len(detail.states) == 18
    assert {s.outcome for s in detail.states} == {str(Outcome.CONSISTENT)}
    assert all(c.stage == "host" for s in detail.states for c in s.checks)
    # The run directory holds the log, so `scenario reproduce` rebuilds any state.
    rdir = lifecycle.run_dir(r.run_id)
    assert (rdir / "log.raw").read_bytes() == log_path.read_bytes()
    from harness.crashstate.stored import reproduce

    out, info = reproduce(detail.states[0].id, db=db, out=tmp_path / "s.img")
    assert out.stat().st_size == 32 << 20 and info["run_id"] == r.run_id


def test_a_log_without_marks_needs_an_entry(log: Log) -> None:
    """QEMU's blklogwrites cannot mark: such a log cannot say where mkfs ended."""
    bare = SimpleNamespace(path=log.path, marks={})
    with pytest.raises(InputError, match="has no marks") as e:
        source.resolve_start(bare, None, None)  # type: ignore[arg-type]
    assert "--after-entry" in (e.value.hint or "")


def test_host_only_work_needs_no_qemu(
    log_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bench/README.md (chaos): with QEMU gone from PATH, a host-only run failed because
    the run's environment probed the accelerator up front. Now only a run that boots a
    guest asks for QEMU, and that one fails as the lab's failure (exit 3) naming it."""
    if not tools.available("e2fsck"):
        pytest.skip("e2fsprogs not installed")
    bin_dir = tmp_path / "bin"  # /usr/bin without qemu-system-x86_64
    bin_dir.mkdir()
    for prog in Path("/usr/bin").iterdir():
        if not prog.name.startswith("qemu-system"):
            (bin_dir / prog.name).symlink_to(prog)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert not tools.available("qemu-system-x86_64") and tools.available("e2fsck")
    for var in ("CRASHLAB_ACCEL", "CRASHLAB_BACKEND"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(backend, "_selected", None)
    monkeypatch.setenv("CRASHLAB_WORK", str(tmp_path / "work"))
    img = SimpleNamespace(hash="img", manifest={})  # a host-only run boots no image
    monkeypatch.setattr(lifecycle, "require_image", lambda: img)
    db = tmp_path / "lab.sqlite"
    argv = ["check-log", str(log_path), *FIXTURE, "--db", str(db)]
    assert main([*argv, "--host-only"]) == 0
    with Store.open(db, create=False) as st:
        (run,) = st.runs()
        detail = st.run_detail(run.id)
    assert run.status == "done" and run.accelerator is None and run.qemu_version is None
    assert [s.outcome for s in detail.states] == [str(Outcome.CONSISTENT)] * 18
    capsys.readouterr()
    assert main(argv) == 3  # the same log checked in a guest too
    err = capsys.readouterr().err
    assert "'qemu-system-x86_64' was not found" in err and "Traceback" not in err, err
