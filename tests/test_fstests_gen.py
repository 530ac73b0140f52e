"""``scenario triage STATE-ID --fstests DIR`` and ``--report`` on a recorded finding
(tests/data/fstests/README.md): the known bug 5254d4181add caught on 6.1.0-54. The
generated test's shape is compared with the recorded one, the report mail is parsed
back with ``email``; no guest boots (the proof is tests/test_fstests_vm.py's)."""

from __future__ import annotations

import email
import email.policy
import gzip
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from harness.cli.main import main
from harness.fstests import gen
from harness.model import shell
from harness.model.ops import Op
from harness.triage import fstest

DATA = Path(__file__).parent / "data" / "fstests"
RUN, STATE = "2e536f255734", "3e916c9f0512e686"


@pytest.fixture()
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``recorded`` with the 6.1.0-54 kernel's manifest in a cache of its own."""
    db = recorded(tmp_path, monkeypatch)
    k = tmp_path / "cache" / "kernels" / "6.1.0-54-amd64"
    k.mkdir(parents=True)
    shutil.copy(DATA / "kernel" / "manifest.json", k)
    (k / "vmlinuz").touch()
    (k / "initrd.img").touch()
    monkeypatch.setenv("CRASHLAB_CACHE", str(tmp_path / "cache"))
    return db


def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The recorded store, the run's directory with its log, a triaged report folder (the
    work directory set to them); the store's path."""
    db = tmp_path / "lab.sqlite"
    con = sqlite3.connect(db)
    con.executescript(gzip.decompress((DATA / "store.sql.gz").read_bytes()).decode())
    con.close()
    work = tmp_path / "work"
    rdir = work / "runs" / RUN
    rdir.mkdir(parents=True)
    (rdir / "log.raw").write_bytes(gzip.decompress((DATA / "log.raw.gz").read_bytes()))
    for f in ("oracle.json", "recording.json"):
        shutil.copy(DATA / f, rdir / f)
    shutil.copytree(DATA / "triage", rdir / "triage" / STATE)
    monkeypatch.setenv("CRASHLAB_WORK", str(work))
    return db


def checkout(tmp_path: Path) -> Path:
    x = tmp_path / "xfstests"
    (x / "tests" / "generic").mkdir(parents=True)
    (x / "check").write_text("#!/bin/sh\n")
    return x


def test_the_finding_becomes_the_recorded_flakey_test(lab: Path, tmp_path: Path) -> None:
    x = checkout(tmp_path)
    for f in ("789", "789.out", "group.list"):  # a built checkout's last test
        (x / "tests" / "generic" / f).write_text(
            "789 auto quick log\n" if f == "group.list" else ""
        )
    argv = ["triage", STATE, "--fstests", str(x), "--no-proof", "--db", str(lab)]
    assert main(argv) == 0
    name = "790-crashlab-3e916c9f"  # fstests' names: 3 digits, then -name (common/test_names)
    made = x / "tests" / "generic" / name
    want = (DATA / "expected" / "crashlab-NNN").read_text().replace("crashlab-NNN", name)
    assert made.read_text() == want
    golden = (DATA / "expected" / "crashlab-NNN.out").read_text()
    assert (made.parent / f"{name}.out").read_text() == golden.replace("crashlab-NNN", name)
    assert golden.startswith("QA output created by crashlab-NNN\n")
    groups = (made.parent / "group.list").read_text().splitlines()
    assert groups == ["789 auto quick log", f"{name} auto quick log metadata"]
    folder = tmp_path / "work" / "runs" / RUN / "triage" / STATE
    assert (folder / "fstests" / name).read_text() == want
    readme = (folder / "README.md").read_text()
    assert "## fstests test" in readme and "Not proven yet" in readme
    # The shape fstests asks of a test, and the crash point right after the dir's fsync.
    text = made.read_text()
    for line in (
        "_begin_fstest auto quick log metadata",
        "_require_scratch",
        "_require_dm_target flakey",
        "_fixed_by_kernel_commit xxxxxxxxxxxx \\",
    ):
        assert line in text.splitlines()
    body = text.split("_scratch_mount\n", 1)[1]
    assert body.index('$XFS_IO_PROG -c "fsync" $SCRATCH_MNT/d\n') < body.index(
        "_flakey_drop_and_remount"
    )


def test_the_golden_output_is_the_oracles_requirement() -> None:
    """d/foo truncated to 0 and fsync'd, linked, the dir fsync'd: both names, size 0."""
    out = (DATA / "expected" / "crashlab-NNN.out").read_text()
    assert "SCRATCH_MNT/d/foo size 0\n" in out and "SCRATCH_MNT/d/bar size 0\n" in out
    assert "d41d8cd98f00b204e9800998ecf8427e  SCRATCH_MNT/d/foo" in out  # md5 of nothing


def test_a_state_between_flushes_gets_a_log_writes_test() -> None:
    ops = [Op("create", "a"), Op("write", "a", data=b"x" * 4096), Op("fsync", "a")]
    f = gen.Finding("ext4", "s", "r", "lost", "k", "rule")
    t = gen.generate(ops, f, fsync_names=True, ordered=False, flakey=False)
    assert t.shape == "log-writes" and "_require_log_writes" in t.text
    assert "_log_writes_replay_log crashlab $SCRATCH_DEV" in t.text
    assert "_flakey" not in t.text
    # The pattern's md5, not the generator's bytes'.
    assert "SCRATCH_MNT/a size 4096" in t.out and "5fed275e7617a806f94c173746a2a723" in t.out


def test_an_op_without_a_shell_spelling_is_named() -> None:
    ops = [Op("tmpfile", "", fd="t"), Op("linkat", "a", fd="t"), Op("sync")]
    with pytest.raises(shell.NoSpelling, match="op tmpfile"):
        gen.generate(
            ops,
            gen.Finding("xfs", "s", "r", "", "", ""),
            fsync_names=True,
            ordered=False,
            flakey=True,
        )


def test_btrfs_only_ops_go_under_tests_btrfs() -> None:
    ops = [Op("subvol_create", "sv"), Op("fsync_dir", "")]
    t = gen.generate(
        ops,
        gen.Finding("btrfs", "s", "r", "", "", ""),
        fsync_names=True,
        ordered=False,
        flakey=True,
    )
    assert t.dir == "btrfs" and "$BTRFS_UTIL_PROG subvolume create" in t.text


def test_bad_input_exits_2(lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nocheck = tmp_path / "empty"
    nocheck.mkdir()
    assert main(["triage", STATE, "--fstests", str(nocheck), "--db", str(lab)]) == 2
    assert "xfstests-dev.git" in capsys.readouterr().err
    assert main(["triage", "2df1b0980b4d2efe", "--report", "--db", str(lab)]) == 2
    assert "not a finding" in capsys.readouterr().err


def test_a_report_of_a_finding_not_triaged_triages_it_first(
    lab: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The triage itself boots guests (tests/test_triage_vm.py); here it is the recorded
    # folder put back, so what is checked is that --report asks for it, then mails.
    from harness.cli import triage as cli_triage

    folder = tmp_path / "work" / "runs" / RUN / "triage" / STATE
    shutil.rmtree(folder)
    asked: list[str] = []

    def triage(args: Any) -> int:
        asked.append(args.state_id)
        shutil.copytree(DATA / "triage", folder)
        return 0

    monkeypatch.setattr(cli_triage, "_triage", triage)
    assert main(["triage", STATE, "--report", "--db", str(lab)]) == 0
    assert asked == [STATE] and "not triaged yet: triaging first" in capsys.readouterr().out
    assert (folder / "report.eml").exists()


def test_the_report_mail_parses_back(lab: Path, tmp_path: Path) -> None:
    x = checkout(tmp_path)
    assert main(["triage", STATE, "--fstests", str(x), "--no-proof", "--db", str(lab)]) == 0
    assert main(["triage", STATE, "--report", "--db", str(lab)]) == 0
    eml = tmp_path / "work" / "runs" / RUN / "triage" / STATE / "report.eml"
    m = email.message_from_bytes(eml.read_bytes(), policy=email.policy.default)
    assert m["To"] == "linux-btrfs@vger.kernel.org"
    assert m["Subject"] == (
        "[REPORT] btrfs: zero size file has non-zero size after power failure on 6.1.190 "
        "(Debian 6.1.190-1)"
    )
    body = m.get_body(preferencelist=("plain",))
    assert body is not None
    text = body.get_content()
    prose = [ln for ln in text.splitlines() if not ln.startswith(("  ", "Kernel:", "m"))]
    assert max(map(len, prose)) <= 72  # wrapped, as lists read mail
    flat = " ".join(text.split())
    for want in (
        "Kernel: 6.1.0-54-amd64 (Debian linux-image-6.1.0-54-amd64 6.1.190-1, upstream 6.1.190)",
        "mkfs: mkfs.btrfs",
        '  xfs_io -c "truncate 0" "$M"/d/foo',
        '  xfs_io -c "fsync" "$M"/d',
        "fsync-names: fsync(2) makes a file's data durable",
        "harness/model/oracle/ and docs/verdicts.md",
        "d/foo is 65536 bytes where 0 were made durable",
        'replay-log --log "$LOG" --replay "$DEV" --limit 1291',
        "replay-log --log slice.log --replay $DEV",
        "./check generic/001-crashlab-3e916c9f",
    ):
        assert " ".join(want.split()) in flat, want
    names = {p.get_filename(): p for p in m.iter_attachments()}
    test = "001-crashlab-3e916c9f"
    assert set(names) == {"slice.log", "replay.sh", test, f"{test}.out"}
    assert names["slice.log"].get_content() == (DATA / "triage" / "slice.log").read_bytes()
    assert "_flakey_drop_and_remount" in names[test].get_content()


def test_the_runs_mkfs_and_mount_options_and_a_held_descriptor() -> None:
    """ext4 without a journal (1308255bbf84's runs): its mkfs options, no journaling
    requirement; a descriptor held across an unlink, closed once writes are dropped."""
    ops = [
        Op("create", "f"),
        Op("sync"),
        Op("open", "f", fd="h"),
        Op("unlink", "f"),
        Op("fsync_fd", fd="h"),
    ]
    f = gen.Finding(
        "ext4", "s", "r", "", "", "", ("-O", "^has_journal"), ("data=ordered",), journaled=False
    )
    t = gen.generate(ops, f, fsync_names=True, ordered=False, flakey=True).text.splitlines()
    assert "_scratch_mkfs -O '^has_journal' >> $seqres.full 2>&1 || _fail \"mkfs failed\"" in t
    assert "_require_metadata_journaling $SCRATCH_DEV" not in t
    assert 'export MOUNT_OPTIONS="$MOUNT_OPTIONS -o data=ordered"' in t
    assert "exec {fd_h}<$SCRATCH_MNT/f" in t
    assert '$XFS_IO_PROG -r -c "fsync" /proc/self/fd/${fd_h}' in t
    drop = t.index("_load_flakey_table $FLAKEY_DROP_WRITES")
    assert t[drop + 1] == "exec {fd_h}<&-" and t[drop + 2] == "_flakey_drop_and_remount"


def test_a_findings_test_keeps_its_name_and_another_takes_the_next_number(
    tmp_path: Path,
) -> None:
    d = tmp_path / "tests" / "generic"
    d.mkdir(parents=True)
    for name in ("001", "001.out", "787", "788-crashlab-3e916c9f", "788-crashlab-3e916c9f.out"):
        (d / name).write_text("")
    assert fstest.next_name(tmp_path, "generic", "3e916c9f0512e686") == "788-crashlab-3e916c9f"
    assert fstest.next_name(tmp_path, "generic", "ddb4e0ab319af7df") == "789-crashlab-ddb4e0ab"


def test_an_exchange_sources_the_renameat2_helpers_before_requiring_them() -> None:
    """The xfs exchange finding's test (docs/findings/xfs-exchange-fsync.md): without
    common/renameat2, ``_require_renameat2`` is not found and both kernels fail it."""
    ops = [Op("create", "a"), Op("create", "b"), Op("sync"), Op("exchange", "a", dst="b"),
           Op("fsync", "a")]  # fmt: skip
    f = gen.Finding("xfs", "s", "r", "", "", "")
    t = gen.generate(ops, f, fsync_names=True, ordered=False, flakey=True).text.splitlines()
    assert t.index(". ./common/renameat2") < t.index("_require_renameat2 exchange")
    assert "$here/src/renameat2 -x $SCRATCH_MNT/a $SCRATCH_MNT/b" in t
