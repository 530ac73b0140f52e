"""A repetition's disks from a kept fill: overlays for what the fault leaves alone, copies of
what it writes, blanks for what an offline wipe empties; and the fill's source disk.
Real files and the real qemu-img; no guest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faults.disk import DiskFault, FaultKind, When
from harness import proc
from harness.config import scenario
from harness.experiments.zfs import basefill, pool
from harness.experiments.zfs.settings import ZfsScenario

MiB = 1 << 20
SIZE = 64 * MiB  # the smallest disk ZFS takes


def kept_fill(tmp_path: Path, sc: ZfsScenario) -> tuple[basefill.Filled, pool.DiskSet]:
    """A 'filled' pool's kept disks (each a different byte) and a repetition's fresh set."""
    cell = next(sc.cells())
    kept = tmp_path / "base"
    for i, d in enumerate(pool.make_disks(kept, cell, sc.fault, spares=False).pool()):
        with open(d.path, "r+b") as f:
            f.write(bytes([i + 1]) * MiB)
    filled = basefill.Filled(1, 1, 1, 1, {}, str(kept))
    return filled, pool.make_disks(tmp_path / "rep", cell, sc.fault)


def contents(path: Path, fmt: str) -> bytes:
    out = path.with_suffix(".flat")
    proc.run(["qemu-img", "convert", "-f", fmt, "-O", "raw", str(path), str(out)])
    return out.read_bytes()


@pytest.mark.parametrize("when", [When.RUNNING, When.OFFLINE])
def test_restore_overlays_what_the_fault_spares(tmp_path: Path, when: When) -> None:
    sc = scenario.load("resilver-75pct", ("disk_size=64M", "cache=true", "fill=50"))
    assert isinstance(sc, ZfsScenario)
    fault = DiskFault(FaultKind.WIPE, disks=(1,), when=when)
    filled, fresh = kept_fill(tmp_path, sc)
    disks = basefill.restore(filled, fresh, fault)
    assert len(disks.data) == 4 and disks.cache is not None and len(disks.spares) == 1
    for i, d in enumerate(disks.pool()):
        kept_file = Path(filled.directory) / f"{d.serial}.raw"
        if i == 1:
            # The wiped disk is a raw file the fault can write: a copy while the pool
            # runs on it first, blank when the wipe happens before the import anyway.
            assert d.format == "raw" and d.path.suffix == ".raw"
            want = kept_file.read_bytes() if when is When.RUNNING else bytes(SIZE)
            assert d.path.read_bytes() == want
            continue
        assert d.format == "qcow2" and not d.path.with_suffix(".raw").exists()
        info = json.loads(proc.run(["qemu-img", "info", "--output=json", str(d.path)]).stdout)
        assert info["full-backing-filename"] == str(kept_file)
        assert contents(d.path, "qcow2") == kept_file.read_bytes()
    assert disks.spares[0].path.read_bytes() == bytes(SIZE)
    # The repetition writes its overlays, never the kept fill.
    proc.run(["qemu-io", "-f", "qcow2", "-c", "write -P 0xaa 0 64k", str(disks.data[0].path)])
    assert (Path(filled.directory) / "zd0.raw").read_bytes()[:MiB] == bytes([1]) * MiB
    assert contents(disks.data[0].path, "qcow2")[:65536] == b"\xaa" * 65536


def test_the_fill_source_is_seeded_and_made_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool, "FILL_CHUNK", 32 * MiB)  # 1 GiB in use; the same code
    a = pool.fill_source(tmp_path / "a", 7)
    b = pool.fill_source(tmp_path / "b", 7)
    c = pool.fill_source(tmp_path / "c", 8)
    assert a.readonly and a.serial == pool.SOURCE_SERIAL
    assert a.path.stat().st_size == pool.FILL_CHUNK
    head = a.path.read_bytes()[:MiB]
    assert head == b.path.read_bytes()[:MiB] != c.path.read_bytes()[:MiB]
    # incompressible: no byte value dominates
    assert max(head.count(bytes([v])) for v in range(256)) < 2 * len(head) // 256
    mtime = a.path.stat().st_mtime_ns
    assert pool.fill_source(tmp_path / "a", 7).path.stat().st_mtime_ns == mtime
    assert [p.name for p in (tmp_path / "a").iterdir()] == [a.path.name]
