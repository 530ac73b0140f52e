"""The filesystems' table (harness/filesystems.py) against the real tools: each one's mkfs
makes an image its own host check calls consistent, a check never changes the state it
judges (fsck.jfs and reiserfsck replay their logs, on a copy), and a destroyed
superblock is a finding, never consistent nor a harness error. Images are made and
checked in userspace; nothing is mounted."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import filesystems, paths, proc, tools
from harness.check import host
from harness.config.crash import FsSpec, FsType
from harness.outcome import Outcome, is_finding

NEW = ("jfs", "reiserfs", "f2fs")


def _made(fs: str, tmp_path: Path) -> Path:
    known = filesystems.get(fs)
    if shutil.which(known.mkfs[0]) is None:
        pytest.skip(f"{known.mkfs[0]} is not installed (package {known.package})")
    image = tmp_path / f"{fs}.img"
    with open(image, "wb") as f:
        f.truncate(known.min_disk)
    proc.run(FsSpec(type=FsType(fs), disk_size=known.min_disk).mkfs_argv(str(image)))
    return image


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("fs", NEW)
def test_a_fresh_filesystem_is_consistent_and_left_as_found(fs: str, tmp_path: Path) -> None:
    image = _made(fs, tmp_path)
    before = _digest(image)
    r = host.host_check(fs, image, tmp_path / "scratch", timeout=120)
    assert r.outcome is Outcome.CONSISTENT, r.output
    assert r.checker == filesystems.get(fs).checker
    assert _digest(image) == before
    assert list((tmp_path / "scratch").iterdir()) == []  # its copy is gone too


@pytest.mark.parametrize("fs", NEW)
def test_a_destroyed_superblock_is_a_finding(fs: str, tmp_path: Path) -> None:
    image = _made(fs, tmp_path)
    with open(image, "r+b") as f:  # every superblock copy these three keep near the start
        f.write(bytes(128 << 10))
    r = host.host_check(fs, image, tmp_path / "scratch", timeout=120)
    assert is_finding(r.outcome), (r.outcome, r.output)


def test_every_filesystem_type_has_an_entry_and_a_checker_version() -> None:
    for t in FsType:
        known = filesystems.get(t)
        assert known.min_disk > 0 and known.check and known.repair
        if shutil.which(known.version[0]):
            assert host.checker_version(t) not in ("", "missing"), t


def _kept_jfs_image(tmp_path: Path, *tools_needed: str) -> Path:
    """The recorded SIGKILL image of docs/findings/jfs-logredo-after-sigkill.md, unpacked."""
    for tool in ("fsck.jfs", *tools_needed):
        if not tools.available(tool):
            pytest.skip(f"{tool} is not installed (package {tools.PACKAGES[tool]})")
    image = tmp_path / "jfs.img"
    with gzip.open(Path(__file__).parent / "data" / "jfs" / "sigkill-64m.raw.gz") as src:
        image.write_bytes(src.read())
    return image


@pytest.fixture
def debian_jfsutils(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian's own fsck.jfs, not the lab's build of it (paths.lab_bin)."""
    monkeypatch.setattr(paths, "lab_bin", lambda: tmp_path / "no-lab-bin")


@pytest.mark.usefixtures("debian_jfsutils")
def test_a_jfs_crash_image_whose_log_replay_fails_is_a_finding(tmp_path: Path) -> None:
    """The recorded SIGKILL image: Debian's fsck.jfs's log replay fails (logredo rc -274,
    its build's bug) yet exits 0 and says clean; the host check goes on to the full check,
    whose repairs make the state a finding, never consistent."""
    image = _kept_jfs_image(tmp_path)
    copy = tmp_path / "copy.img"
    shutil.copy(image, copy)
    replay = proc.run(["fsck.jfs", "--replay_journal_only", str(copy)], check=False)
    assert replay.returncode == 0 and "logredo failed (rc=-274)" in replay.stdout
    r = host.host_check("jfs", image, tmp_path / "scratch", timeout=120)
    assert r.outcome is Outcome.REPAIRED, r.output
    assert "reconnected to /lost+found" in r.output


def test_the_lab_s_fsck_jfs_replays_the_log_and_the_state_is_consistent(tmp_path: Path) -> None:
    """The same image with the fsck.jfs the image build made (images/jfsutils, exported
    to paths.lab_bin for the host): the log replays and the full check finds nothing."""
    if not (paths.lab_bin() / "fsck.jfs").exists():
        pytest.skip("no lab build of fsck.jfs: `scenario image build` makes it")
    image = _kept_jfs_image(tmp_path)
    copy = tmp_path / "copy.img"
    shutil.copy(image, copy)
    replay = proc.run(["fsck.jfs", "--replay_journal_only", str(copy)], check=False)
    assert replay.returncode == 0 and "logredo failed" not in replay.stdout, replay.stdout
    assert host.checker_version("jfs").endswith("(lab build)")
    r = host.host_check("jfs", image, tmp_path / "scratch", timeout=120)
    assert r.outcome is Outcome.CONSISTENT, r.output
    full = proc.run(["fsck.jfs", "-f", "-n", str(copy)], check=False)
    assert full.returncode == 0 and "lost+found" not in full.stdout, full.stdout


@contextlib.contextmanager
def _read_only_loop(image: Path) -> Iterator[str]:
    """jfs_logdump opens only block devices: a read-only loop device, always detached."""
    if os.geteuid() != 0:
        pytest.skip("a loop device for jfs_logdump needs root")
    dev = proc.run(["losetup", "--read-only", "--find", "--show", str(image)]).stdout.strip()
    try:
        yield dev
    finally:
        proc.run(["losetup", "--detach", dev])


def _logdump(image: Path, out: Path) -> str:
    """Debian's jfs_logdump over ``image``'s log: it writes ./jfslog.dmp, so ``out`` is its cwd."""
    out.mkdir()
    with _read_only_loop(image) as dev:
        proc.run(["jfs_logdump", dev], cwd=out)
    return (out / "jfslog.dmp").read_text()


def _field(record: str, name: str) -> int:
    found = re.search(rf"{name} = d (\d+)", record)
    assert found, (name, record)
    return int(found.group(1))


def test_the_log_record_fsck_jfs_rejects_is_well_formed(tmp_path: Path) -> None:
    """logredo walks the log back from its end; the first after-image it applies is record 1
    at log address 0x6c46c, and Debian's fsck.jfs rejects it (UPDATEPAGE_BAD_RANGE). The
    record is whole: an INODE after-image of one 128-byte line whose segment descriptor
    (the data's last 4 bytes: offset, then length, in lines) is offset 0, length 1 -- inside
    its page, so logredo's range check passes on it. The rejection is the Debian build's
    split `afterdata` (docs/findings/jfs-logredo-after-sigkill.md), not the kernel's log."""
    dump = _logdump(_kept_jfs_image(tmp_path, "jfs_logdump", "losetup"), tmp_path / "dump")
    records = dump.split("-" * 70)
    assert "Logaddr= x 6c490" in records[0] and "LOG_COMMIT" in records[0]
    rec = records[1]
    assert "logrec d 1   Logaddr= x 6c46c" in rec and "LOG_REDOPAGE" in rec
    assert "logtid = d 4623" in records[0] and "logtid = d 4623" in rec
    assert "type = d 1 REDOPAGE:INODE" in rec
    length, l2line = _field(rec, "data length"), _field(rec, "l2linesize")
    # The hex dump's last word: 132 bytes end on a whole word (repeated lines show as "*").
    rows = re.findall(r"^\s*0x[0-9a-f]+\s+((?:[0-9A-F]{2,8} ?)+)", rec, re.M)
    tail = bytes.fromhex(rows[-1].split()[-1])
    assert len(tail) == 4, rows
    off, ln = int.from_bytes(tail[:2], "little"), int.from_bytes(tail[2:], "little")
    assert (off, ln, l2line, length) == (0, 1, 7, 132)
    assert (ln << l2line) + 4 == length and (off + ln) << l2line <= 4096


@pytest.mark.usefixtures("debian_jfsutils")
def test_a_failed_jfs_log_replay_leaves_the_log_unredone_under_a_clean_superblock(
    tmp_path: Path,
) -> None:
    """Why the kernel refuses the volume after fsck.jfs said clean: the failed replay marks
    the aggregate's superblock clean but leaves the log's superblock at LOGMOUNT (state 0,
    its end unmoved), and the kernel's lmLogInit refuses a log not LOGREDONE (state 1)."""
    image = _kept_jfs_image(tmp_path, "jfs_logdump", "losetup", "jfs_tune")
    replay = proc.run(["fsck.jfs", "--replay_journal_only", str(image)], check=False)
    assert "logredo failed (rc=-274)" in replay.stdout
    assert re.search(r"JFS state:\s+clean", proc.run(["jfs_tune", "-l", str(image)]).stdout)
    head = _logdump(image, tmp_path / "dump").split("=" * 54)[0]
    assert re.search(r"state\s+: x 0 ", head) and re.search(r"end\s+: x 202c ", head), head


@pytest.mark.parametrize("scenario", ["jfs-fsync", "ace-seq1"])
def test_a_missing_host_checker_stops_the_run_before_any_guest(
    scenario: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without its host checker every state's host check was a harness error and a run
    could pass on its guest checks alone (seen: jfs-fsync exited 0 with fsck.jfs gone).
    Now the run stops before it begins: exit 3, the program and its package named."""
    from harness.cli.main import main

    fs = "jfs" if scenario == "jfs-fsync" else "ext4"
    gone = filesystems.get(fs).check[0]
    real = tools.available
    monkeypatch.setattr(tools, "available", lambda tool: tool != gone and real(tool))
    db = tmp_path / "lab.sqlite"
    assert main(["run", scenario, "--set", f"fs.type={fs}", "--db", str(db)]) == 3
    err = capsys.readouterr().err
    assert f"required program {gone!r} was not found" in err
    assert f"apt-get install {filesystems.get(fs).package}" in err
    assert "Traceback" not in err


def test_reproduce_shows_the_runs_own_checker_and_jfs_replay_first(tmp_path: Path) -> None:
    """`scenario reproduce` printed e2fsck for every image, and a bare mount a JFS state's
    kernel refuses: the lines name the run's filesystem's checker, and the log replay a
    dirty JFS volume needs before its mount."""
    from harness.cli.run import inspect_lines

    img = tmp_path / "s.img"
    jfs = inspect_lines(img, "jfs")
    assert "fsck.jfs --replay_journal_only /dev/disk/by-id/virtio-disk0 ; mount" in jfs[1]
    assert jfs[2].split("#")[0].split() == ["fsck.jfs", "-n", str(img)]
    xfs = inspect_lines(img, "xfs")
    assert "; mount" not in xfs[1]
    assert xfs[2].split("#")[0].split() == ["xfs_repair", "-n", "-f", str(img)]
    assert "e2fsck -fn" in inspect_lines(img, None)[2]
