from __future__ import annotations

import ctypes
import dataclasses
import errno
import hashlib
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logbuilder import LogBuilder, Op, model_image, random_builder

import harness.replay.replayer as replay
from harness.errors import InputError
from harness.record.logwrites import open_log
from harness.replay.crashstates import CrashState, generate
from harness.replay.replayer import Replayer, image_digest, materialize, replay_order

SIZE = 1024 * 512
SPECS: list[dict[str, object]] = [
    {"kind": "flush"},
    {"kind": "fua"},
    {"kind": "mark"},
    {"kind": "every", "n": 5},
    {"kind": "percent", "at": [25, 75]},
    {"kind": "reorder", "max_states": 120, "per_point": 8},
    {"kind": "torn", "max_states": 40},
]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def expected(ops: list[Op], s: CrashState) -> bytes:
    applied = [i for i in range(s.prefix) if i not in s.dropped and i != s.torn]
    torn = (s.torn, s.torn_runs) if s.torn is not None else None
    return model_image(ops, SIZE, applied, torn)


def test_full_replay_matches_model(tmp_path: Path) -> None:
    b = random_builder(random.Random(1), 400, 1024, mkfs_at=10)
    with open_log(b.build(tmp_path / "log")) as log, Replayer(log, tmp_path / "img", SIZE) as r:
        r.advance(len(log.entries))
        assert (tmp_path / "img").read_bytes() == model_image(b.ops, SIZE, range(len(b.ops)))
        assert r.verify_base()


@pytest.mark.parametrize("sectorsize", [512, 4096])
def test_incremental_equals_scratch_and_model(tmp_path: Path, sectorsize: int) -> None:
    b = random_builder(random.Random(sectorsize), 250, 1024, sectorsize, mkfs_at=15)
    with open_log(b.build(tmp_path / "log")) as log, Replayer(log, tmp_path / "img", SIZE) as r:
        states = generate(log, SPECS, seed=2)
        kinds = {s.generator for s in states}
        assert {"reorder", "torn", "flush"} <= kinds
        seen = 0
        for s in r.walk(states):
            got = r.digest()
            assert got == sha(expected(b.ops, s)), s.describe()
            (tmp_path / "scratch").unlink(missing_ok=True)
            assert got == image_digest(materialize(log, s, tmp_path / "scratch", SIZE))
            seen += 1
        assert seen == len(states)
        # After each restore the image is the base: the walk ends restored.
        assert r.current is None and r.verify_base()
        assert r.base == max(s.first_divergent for s in states)


def test_restore_returns_to_base_and_backwards_goto(tmp_path: Path) -> None:
    b = random_builder(random.Random(5), 200, 1024, mkfs_at=5)
    with open_log(b.build(tmp_path / "log")) as log, Replayer(log, tmp_path / "img", SIZE) as r:
        states = generate(log, SPECS, seed=9)
        late = max(states, key=lambda s: s.first_divergent)
        r.goto(late)
        assert r.digest() == sha(expected(b.ops, late))
        r.restore()
        assert r.base == late.first_divergent and r.verify_base()
        # Unsorted: states behind the base restart from a zeroed image, still exact.
        for s in random.Random(3).sample(states, 25):
            with r.at(s) as img:
                assert img.read_bytes() == expected(b.ops, s), s.describe()
            assert r.verify_base()


def test_save_range_undoes_checker_writes(tmp_path: Path) -> None:
    b = random_builder(random.Random(8), 100, 1024, mkfs_at=5)
    with open_log(b.build(tmp_path / "log")) as log, Replayer(log, tmp_path / "img", SIZE) as r:
        s = generate(log, [{"kind": "reorder"}])[-1]
        r.goto(s)
        # A "repairing checker": writes over data and over a hole at the end.
        r.save_range(4096, 8192)
        r.save_range(SIZE - 4096, 4096)
        with (tmp_path / "img").open("r+b") as f:
            f.seek(4096)
            f.write(b"\xee" * 8192)
            f.seek(SIZE - 4096)
            f.write(b"\xee" * 4096)
        r.restore()
        assert r.verify_base()


def test_discard_punches_holes_and_undo_restores(tmp_path: Path) -> None:
    b = LogBuilder().write(0, b"\x01" * 65536).flush().mark("crashlab:mkfs")
    b.write(256, b"\x02" * 512).discard(0, 128).flush()
    with open_log(b.build(tmp_path / "log")) as log, Replayer(log, tmp_path / "img", SIZE) as r:
        (s,) = [s for s in generate(log, [{"kind": "reorder"}]) if s.dropped == (3,)]
        r.goto(s)  # the write lost, the discard after it applied (under the journal)
        img = tmp_path / "img"
        assert img.read_bytes() == bytes(SIZE)
        assert img.stat().st_blocks * 512 < 65536  # a hole, not written zeros
        r.restore()
        assert img.read_bytes()[:65536] == b"\x01" * 65536


def test_punch_hole_fallback_writes_zeros(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unsupported(fd: int, mode: int, off: int, length: int) -> int:
        ctypes.set_errno(errno.EOPNOTSUPP)
        return -1

    monkeypatch.setattr(replay, "_fallocate", unsupported)
    path = tmp_path / "f"
    path.write_bytes(b"\xff" * (3 << 20))
    with path.open("r+b") as f:
        replay.punch_hole(f.fileno(), 100, (2 << 20) + 5)
    data = path.read_bytes()
    assert data[:100] == b"\xff" * 100 and data[100 : (2 << 20) + 105] == bytes((2 << 20) + 5)
    assert data[(2 << 20) + 105 :] == b"\xff" * (len(data) - (2 << 20) - 105)


def test_bad_states_and_sizes(tmp_path: Path) -> None:
    b = random_builder(random.Random(4), 60, 1024, mkfs_at=5)
    with open_log(b.build(tmp_path / "log")) as log:
        with pytest.raises(InputError, match="past the end of a 4096-byte device"):
            Replayer(log, tmp_path / "img", 4096)
        s = generate(log, [{"kind": "mark"}])[0]
        with Replayer(log, tmp_path / "img", SIZE) as r:
            with pytest.raises(InputError, match="belongs to another log"):
                r.goto(dataclasses.replace(s, log_hash="0" * 64))
            with pytest.raises(InputError, match="beyond the log"):
                r.goto(dataclasses.replace(s, prefix=10_000))
            with pytest.raises(InputError, match="torn runs exceed"):
                r.goto(dataclasses.replace(s, torn=0, torn_runs=((0, 10_000),)))


def test_replay_order_never_goes_back(tmp_path: Path) -> None:
    b = random_builder(random.Random(6), 200, 1024, mkfs_at=5)
    with open_log(b.build(tmp_path / "log")) as log:
        order = replay_order(generate(log, SPECS, seed=1))
        fds = [s.first_divergent for s in order]
        assert fds == sorted(fds)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(10, 120))
def test_property_walk_matches_model(
    tmp_path_factory: pytest.TempPathFactory, seed: int, n: int
) -> None:
    d = tmp_path_factory.mktemp("p")
    b = random_builder(random.Random(seed), n, 1024, mkfs_at=min(3, n - 1))
    with open_log(b.build(d / "log")) as log, Replayer(log, d / "img", SIZE) as r:
        for s in r.walk(generate(log, SPECS, seed=seed)):
            assert r.digest() == sha(expected(b.ops, s)), s.describe()
        assert r.verify_base()


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(10, 120))
def test_property_changes_cover_every_changed_byte(
    tmp_path_factory: pytest.TempPathFactory, seed: int, n: int
) -> None:
    """What ``rp.changes()`` reports between two states visited one after the other holds
    every byte that differs between their images (what ``check.jbd2`` relies on to keep
    its journal walk), also across a rebuild from zero (``distrust``)."""
    d = tmp_path_factory.mktemp("c")
    b = random_builder(random.Random(seed), n, 1024, mkfs_at=min(3, n - 1))
    with open_log(b.build(d / "log")) as log, Replayer(log, d / "img", SIZE) as r:
        changes = r.changes()
        assert changes.take() is None  # a new tracker knows nothing of what was before
        before = (d / "img").read_bytes()
        for k, s in enumerate(r.walk(generate(log, SPECS, seed=seed))):
            now = (d / "img").read_bytes()
            told = changes.take()
            if told is not None:
                covered = bytearray(SIZE)
                for off, length in told:
                    covered[off : off + length] = b"\1" * length
                for sector in range(0, SIZE, 512):  # the bytes that differ, sector by sector
                    if now[sector : sector + 512] != before[sector : sector + 512]:
                        diff = [i for i in range(sector, sector + 512) if now[i] != before[i]]
                        assert all(covered[i] for i in diff), s.describe()
            before = now
            if k == 3:
                r.distrust()
                assert changes.take() is None
