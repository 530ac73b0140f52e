"""Host checks on several cores give exactly what one core gives."""

from __future__ import annotations

from pathlib import Path

from logbuilder import LogBuilder

from harness import proc
from harness.check import parallel
from harness.record import logwrites
from harness.replay import crashstates

FUA = logwrites.FUA


def _ext4_log(tmp_path: Path) -> tuple[Path, int]:
    """A log that writes a real ext4 image block by block: its prefixes are partial
    filesystems, which e2fsck judges differently."""
    img = tmp_path / "src.img"
    size = 8 << 20
    with open(img, "wb") as f:
        f.truncate(size)
    proc.run(["mkfs.ext4", "-q", "-F", "-b", "4096", img])
    data = img.read_bytes()
    b = LogBuilder().mark("crashlab:mkfs")
    n = 0
    for off in range(0, size, 4096):
        block = data[off : off + 4096]
        if block.count(0) != len(block):
            n += 1
            b.write(off // 512, block, flags=FUA)
    log = tmp_path / "log.raw"
    log.write_bytes(b.to_bytes())
    return log, size


def test_parallel_equals_sequential(tmp_path: Path) -> None:
    log, size = _ext4_log(tmp_path)
    with logwrites.open_log(log) as lg:
        states = crashstates.generate(lg, [{"kind": "fua"}])
    assert len(states) >= 4
    one = {
        s.id: (r.outcome, r.exit_status)
        for s, r in parallel.check_run(log, states, "ext4", size, tmp_path / "seq")
    }
    two = {
        s.id: (r.outcome, r.exit_status)
        for s, r in parallel.host_checks(log, states, "ext4", size, tmp_path / "par", workers=2)
    }
    assert one == two and len(one) == len(states)
    # The prefixes really differ: not every partial filesystem gets the same verdict.
    assert len({o for o, _ in one.values()}) > 1


def test_split_is_contiguous_and_complete(tmp_path: Path) -> None:
    log, _ = _ext4_log(tmp_path)
    with logwrites.open_log(log) as lg:
        states = crashstates.generate(lg, [{"kind": "fua"}, {"kind": "every", "n": 5}])
    runs = parallel.split(states, 3)
    flat = [s for r in runs for s in r]
    assert sorted(s.id for s in flat) == sorted(s.id for s in states)
    assert flat == parallel.replay.replay_order(states)
