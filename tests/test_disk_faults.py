"""The disk fault vocabulary (faults/disk.py) on small files."""

from __future__ import annotations

from pathlib import Path

import pytest

from faults import disk
from faults.disk import LABEL_BYTES, DiskFault, FaultKind

SIZE = 4 << 20


def ones(tmp_path: Path, name: str = "d.raw", size: int = SIZE) -> Path:
    p = tmp_path / name
    p.write_bytes(b"\xff" * size)
    return p


def zeroed(p: Path) -> list[int]:
    data = p.read_bytes()
    return [i for i in range(0, len(data), 4096) if data[i] == 0]


def test_zero_range_is_exact_and_clipped(tmp_path: Path) -> None:
    p = ones(tmp_path)
    d = disk.zero_range(p, 4096, 8192)
    data = p.read_bytes()
    assert data[4095] == 0xFF and data[4096:12288] == bytes(8192) and data[12288] == 0xFF
    assert d.bytes_zeroed == 8192
    # Past the end: clipped, and the file does not grow.
    d = disk.zero_range(p, SIZE - 100, 1000)
    assert d.ranges == ((SIZE - 100, 100),) and p.stat().st_size == SIZE


def test_zero_percent_spares_the_labels(tmp_path: Path) -> None:
    p = ones(tmp_path)
    d = disk.zero_percent(p, 100, labels=False)
    data = p.read_bytes()
    assert data[:LABEL_BYTES] == b"\xff" * LABEL_BYTES
    assert data[-LABEL_BYTES:] == b"\xff" * LABEL_BYTES
    assert data[LABEL_BYTES:-LABEL_BYTES] == bytes(SIZE - 2 * LABEL_BYTES)
    assert d.bytes_zeroed == SIZE - 2 * LABEL_BYTES


def test_zero_percent_with_labels_starts_at_zero(tmp_path: Path) -> None:
    p = ones(tmp_path)
    d = disk.zero_percent(p, 25, labels=True)
    assert d.ranges == ((0, SIZE // 4),)
    with pytest.raises(ValueError):
        disk.zero_percent(p, 0)


def test_bitflips_are_seeded_distinct_and_outside_labels(tmp_path: Path) -> None:
    a, b = ones(tmp_path, "a"), ones(tmp_path, "b")
    da = disk.flip_bits(a, 50, seed=7)
    db = disk.flip_bits(b, 50, seed=7)
    assert da.flips == db.flips and a.read_bytes() == b.read_bytes()
    data = a.read_bytes()
    assert len({off for off, _ in da.flips}) == 50
    for off, bit in da.flips:
        assert LABEL_BYTES <= off < SIZE - LABEL_BYTES
        assert data[off] == 0xFF ^ (1 << bit)
    assert sum(bin(x ^ 0xFF).count("1") for x in data) == 50


def test_wipe_and_apply_by_index(tmp_path: Path) -> None:
    files = [ones(tmp_path, f"d{i}") for i in range(3)]
    out = disk.apply(DiskFault(FaultKind.WIPE, disks=(0, 2)), files)
    assert [Path(d.path).name for d in out] == ["d0", "d2"]
    assert files[0].read_bytes() == bytes(SIZE) and files[2].read_bytes() == bytes(SIZE)
    assert files[1].read_bytes() == b"\xff" * SIZE
    assert out[0].to_json()["bytes_zeroed"] == SIZE


def test_too_small_for_labels(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        disk.zero_percent(ones(tmp_path, size=LABEL_BYTES), 10)
