"""harness/check/jbd2.py and extjournal.py against e2fsck itself: on every crash state of
the recorded ext4 logs, and on journals debugfs writes (ext3 block-mapped journals, 32-bit
tags, csum v3, revokes, wrap-around), the blocks a real ``e2fsck -E journal_only -p``
changes are inside the predicted set, and the host check leaves the image byte for byte
as it found it."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import os
import shutil
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from harness.check import extfs, extjournal, jbd2
from harness.check import host as check
from harness.errors import HarnessError
from harness.outcome import Outcome
from harness.record.logwrites import open_log
from harness.replay import crashstates
from harness.replay.replayer import Replayer

DATA = Path(__file__).parent / "data" / "logs"
pytestmark = pytest.mark.skipif(shutil.which("e2fsck") is None, reason="needs e2fsprogs")
SPECS = [{"kind": "fua"}, {"kind": "torn"}, {"kind": "reorder"}]


@pytest.fixture(autouse=True)
def guard_every_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Here the guard watches every replay (runs watch a sample: extjournal.GUARD_EVERY),
    so a write outside the set fails the test even where no diff would show it."""
    monkeypatch.setattr(extjournal, "GUARD_EVERY", 1)


def changed(a: Path, b: Path) -> list[int]:
    """Offsets of the 512-byte sectors that differ between two images."""
    out: list[int] = []
    chunk = 1 << 22
    with open(a, "rb") as fa, open(b, "rb") as fb:
        off = 0
        while True:
            x, y = fa.read(chunk), fb.read(chunk)
            if not x and not y:
                return out
            if x != y:
                out += [
                    off + k
                    for k in range(0, max(len(x), len(y)), 512)
                    if x[k : k + 512] != y[k : k + 512]
                ]
            off += chunk


def digest(p: Path) -> str:
    with p.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def predicted_or_none(image: Path) -> list[tuple[int, int]] | None:
    with open(image, "rb") as f:
        try:
            return jbd2.replay_writes(f.fileno())
        except extfs.Unsure:
            return None


def assert_superset(image: Path, scratch: Path) -> bool:
    """Whether the image was modelled; if so, e2fsck changed nothing outside the set."""
    ranges = predicted_or_none(image)
    if ranges is None:
        return False
    copy = scratch / "copy.img"
    subprocess.run(["cp", "--sparse=always", image, copy], check=True)
    r = subprocess.run(["e2fsck", "-E", "journal_only", "-p", copy], capture_output=True)
    assert r.returncode < 8 or not changed(image, copy), r.stdout
    for sector in changed(image, copy):
        assert any(o <= sector < o + n for o, n in ranges), f"sector at {sector} not predicted"
    copy.unlink()
    return True


def check_log(
    log_path: Path, size: int, tmp: Path, start: int | None = None, most: int = 1000
) -> tuple[int, int]:
    """The log's states (``most`` of them, spread): superset, and host_check leaves the
    image unchanged."""
    modelled = states = 0
    with open_log(log_path) as lg, Replayer(lg, tmp / "work.img", size) as rp:
        every = crashstates.generate(lg, SPECS, start=start)
        for _ in rp.walk(crashstates.spread(every, most)):
            states += 1
            modelled += assert_superset(rp.image, tmp)
            before = digest(rp.image)
            r = check.host_check("ext4", rp.image, tmp / "scratch", changes=rp.changes())
            assert r.outcome is not Outcome.HARNESS_ERROR, r.output
            assert digest(rp.image) == before
    return states, modelled


def unpack(name: str, tmp: Path) -> Path:
    out = tmp / f"{name}.raw"
    out.write_bytes(gzip.decompress((DATA / f"{name}.log.gz").read_bytes()))
    return out


def test_ops_small_every_state(tmp_path: Path) -> None:
    size = json.loads((DATA / "ext4-ops-small.json").read_text())["device_size"]
    states, modelled = check_log(unpack("ext4-ops-small", tmp_path), size, tmp_path)
    # 137 states; the 12 not modelled have no superblock yet (torn or reordered mkfs)
    assert states == 137 and modelled == 125


def test_fstests_482_states(tmp_path: Path) -> None:
    """64 of its 194 states (a 200 MiB image is hashed twice a state); all 194 passed
    when this was written (35 modelled, 157 with orphans, 2 without a superblock)."""
    meta = json.loads((DATA / "fstests-generic-482.json").read_text())
    log = unpack("fstests-generic-482", tmp_path)
    states, modelled = check_log(
        log, meta["device_size"], tmp_path, start=meta["mkfs_entry"], most=64
    )
    # most fsstress states leave orphans for e2fsck to release: those take the -z path
    assert states == 64 and modelled >= 8


def kept_walks(log_path: Path, size: int, tmp: Path, start: int | None = None) -> Counter[str]:
    """Every state of the log: the set read with the working image's tracker (the walk
    kept from the state before where nothing it read was written) equals the set read
    afresh; how the tracked calls went."""
    stats: Counter[str] = Counter()
    with open_log(log_path) as lg, Replayer(lg, tmp / "work.img", size) as rp:
        for _ in rp.walk(crashstates.generate(lg, SPECS, start=start)):
            with open(rp.image, "rb") as f:
                before = dict(jbd2.STATS)
                try:
                    tracked = jbd2.replay_writes(f.fileno(), rp.changes())
                except extfs.Unsure as e:
                    tracked = [(-1, len(str(e)))]
                stats.update({k: v - before.get(k, 0) for k, v in jbd2.STATS.items()})
                try:
                    fresh = jbd2.replay_writes(f.fileno())
                except extfs.Unsure as e:
                    fresh = [(-1, len(str(e)))]
            assert tracked == fresh
    return stats


def test_kept_walk_equals_fresh_one(tmp_path: Path) -> None:
    """On every state of both recorded ext4 logs (fua, torn, reorder: the replayer goes
    back and forth over the journal's end), and the walk is kept for most of them."""
    size = json.loads((DATA / "ext4-ops-small.json").read_text())["device_size"]
    ops = kept_walks(unpack("ext4-ops-small", tmp_path), size, tmp_path)
    meta = json.loads((DATA / "fstests-generic-482.json").read_text())
    fst = kept_walks(
        unpack("fstests-generic-482", tmp_path), meta["device_size"], tmp_path, meta["mkfs_entry"]
    )
    assert ops["kept"] + ops["grown"] > ops["afresh"], ops
    # generic/482's states mostly list orphans, and jbd2 checkpoints the superblock and
    # group 0's descriptor between them: the walk is kept across both (it was read
    # afresh after each: 16 afresh to 17 kept or grown before, 34 to 139 now).
    assert fst["kept"] + fst["grown"] > 3 * fst["afresh"], fst
    assert fst["moved"] > 0, fst


def debugfs_journal(tmp: Path, mkfs: list[str], jo: str, transactions: int) -> Path:
    """An image whose journal needs recovery, written by debugfs' own jbd2 code: each
    transaction logs two free data blocks (so the replayed image stays consistent), one
    transaction revokes one of them."""
    img = tmp / "j.img"
    img.unlink(missing_ok=True)
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    megs = 4 if "4096" in mkfs else 1  # the smallest journal: 1024 blocks
    subprocess.run([*mkfs, "-q", "-F", "-J", f"size={megs}", img], check=True)
    data = tmp / "data"
    data.write_bytes(os.urandom(8192))
    cmds = [f"jo {jo}"]
    cmds += [f"jw -b {10000 + i},{11000 + i % 7} {data}" for i in range(transactions)]
    cmds += [f"jw -b 12000 -r 10001 {data}", "jc"]
    subprocess.run(
        ["debugfs", "-w", "-f", "-", img],
        input="\n".join(cmds).encode(),
        capture_output=True,
        check=True,
    )
    return img


def rotate(img: Path, by: int) -> None:
    """Move the journal's log area round by ``by`` blocks and its start with it, so the
    log wraps past its last block: what a journal in use looks like (debugfs cannot
    write one; it stops at the end). Only for journals without a superblock checksum."""
    with open(img, "r+b") as f:
        fd = f.fileno()
        sb = extfs.Super(os.pread(fd, 1024, 1024))
        j = extfs.Journal(extfs.Image(fd), sb)
        jsb = bytearray(j.block(0))
        maxlen, first, _, start = struct.unpack_from(">IIII", jsb, 16)
        n = maxlen - first
        log = [j.block(first + i) for i in range(n)]
        for i, block in enumerate(log):
            os.pwrite(fd, block, j.phys(first + (i + by) % n) * sb.bs)
        struct.pack_into(">I", jsb, 28, first + (start - first + by) % n)
        os.pwrite(fd, bytes(jsb), j.phys(0) * sb.bs)


EXT4_32 = ["mkfs.ext4", "-O", "^64bit,^metadata_csum"]


@pytest.mark.parametrize(
    ("mkfs", "jo", "transactions", "wrap"),
    [
        (["mkfs.ext3"], "", 3, False),  # block-mapped journal, 32-bit tags, no checksums
        (["mkfs.ext3"], "", 200, True),
        (EXT4_32, "", 200, True),
        # v1 commit checksums; e2fsck calls the last (revoke) transaction corrupt and
        # stops before it: the set still holds it, a superset
        (EXT4_32, "-c", 200, False),
        (["mkfs.ext4", "-b", "4096"], "-c", 200, False),  # 64-bit tags, csum v3, 4 KiB
    ],
    ids=["ext3", "ext3-wrapped", "ext4-32bit-wrapped", "ext4-32bit-csum-v1", "ext4-64bit-csum3-4k"],
)
def test_debugfs_journals(
    tmp_path: Path, mkfs: list[str], jo: str, transactions: int, wrap: bool
) -> None:
    img = debugfs_journal(tmp_path, mkfs, jo, transactions)
    if wrap:
        rotate(img, 1024 - 1 - 100)  # the start 100 blocks before the end
    ranges = predicted_or_none(img)
    assert ranges is not None
    blocks = {o // 1024 for o, n in ranges for o in range(o, o + n, 1024)}
    bs = 4096 if "4096" in mkfs else 1024
    last = 10000 + transactions - 1
    assert {b * bs // 1024 for b in (10000, last, 11000, 12000)} <= blocks
    assert assert_superset(img, tmp_path)
    before = digest(img)
    r = check.host_check(mkfs[0].split(".")[1], img, tmp_path / "scratch")
    assert r.outcome is Outcome.CONSISTENT, r.output
    assert digest(img) == before
    if jo and bs == 1024:
        return
    copy = tmp_path / "replayed.img"  # and the replay did write the last transaction
    shutil.copyfile(img, copy)
    subprocess.run(["e2fsck", "-E", "journal_only", "-p", copy], capture_output=True)
    with open(copy, "rb") as f:
        assert os.pread(f.fileno(), 8, 12000 * bs) == (tmp_path / "data").read_bytes()[:8]


def test_tags_read_as_count_tags_does() -> None:
    """The run-at-a-time reader against a tag-at-a-time one (e2fsck/recovery.c's loop)
    on descriptor blocks with UUIDs in the middle, a LAST_TAG, and no LAST_TAG."""

    def slow(block: bytes, t: jbd2.Tags) -> list[int]:
        out, p = [], 12
        while p + t.size <= t.room:
            flags = int.from_bytes(block[p + 6 : p + 8], "big")
            hi = int.from_bytes(block[p + 8 : p + 12], "big") if t.high else 0
            out.append(int.from_bytes(block[p : p + 4], "big") | hi << 32)
            p += t.size + (0 if flags & jbd2.FLAG_SAME_UUID else 16)
            if flags & jbd2.FLAG_LAST_TAG:
                break
        return out

    for incompat in (0, 0x2, 0x8, 0x8 | 0x2, 0x10, 0x10 | 0x2):
        t = jbd2.Tags(incompat, 1024)
        for uuids, last in (({0}, 40), ({0, 5, 6}, 30), (set(), None), ({0, 3}, None)):
            block = bytearray(os.urandom(1024))
            p = 12
            for k in range(200):
                if p + t.size > t.room:
                    break
                flags = (0 if k in uuids else jbd2.FLAG_SAME_UUID) | (
                    jbd2.FLAG_LAST_TAG if k == last else 0
                )
                struct.pack_into(">I", block, p, 1000 + k)
                block[p + 6 : p + 8] = flags.to_bytes(2, "big")
                if t.high:
                    struct.pack_into(">I", block, p + 8, k % 2)
                p += t.size + (0 if flags & jbd2.FLAG_SAME_UUID else 16)
            assert t.targets(bytes(block)) == slow(bytes(block), t)


def test_a_write_outside_the_set_is_a_harness_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard: with a set that leaves out the journal's targets, e2fsck's replay
    writes outside it, and the check says so instead of judging on."""
    img = debugfs_journal(tmp_path, ["mkfs.ext4", "-O", "^64bit,^metadata_csum"], "", 3)
    monkeypatch.setattr(jbd2, "replay_writes", lambda fd, changes=None: [(1024, 1024)])
    r = check.host_check("ext4", img, tmp_path / "scratch")
    assert r.outcome is Outcome.HARNESS_ERROR and "had not saved" in r.output


def test_runs_watch_the_first_replays_then_a_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extjournal, "_replays", itertools.count())
    monkeypatch.setattr(extjournal, "GUARD_FIRST", 3)
    monkeypatch.setattr(extjournal, "GUARD_EVERY", 4)
    watched = [n for n in range(20) if extjournal._guard_this()]
    assert watched == [0, 1, 2, 4, 8, 12, 16]


def test_the_undo_file_goes_even_when_putting_the_image_back_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An undo file lives in /dev/shm (memory): one left per failed check had piled up to
    2,040 files there."""
    undo = tmp_path / "u.e2undo"
    undo.write_bytes(b"\0" * 4096)

    def broken(path: Path) -> bool:
        raise HarnessError("unreadable undo file")

    monkeypatch.setattr(extjournal.e2undo, "keys", broken)
    with pytest.raises(HarnessError):
        extjournal._undo(undo, tmp_path / "image")
    assert not undo.exists()
