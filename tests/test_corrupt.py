"""The zeroed-block control on a real ext4 image, in userspace: debugfs puts a file in
the image (no mount), the oracle says it is required, and the corruption must change it."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.model.oracle import FORMAT
from harness.proc import run
from harness.replay.corrupt import zero_durable_block


def oracle_for(name: str, size: int) -> dict[str, object]:
    entry = {
        "mark": "crashlab:sync:1",
        "files": {name: {"sha256": "x", "size": size}},
        "dirs": [],
        "absent": [],
        "prefixes": {},
        "either": {},
        "exact": {"files": {}, "absent": []},
    }
    return {"format": FORMAT, "marks": [entry], "final_mark": "crashlab:sync:1"}


def test_zeroes_a_block_the_mark_requires(tmp_path: Path) -> None:
    img, data = tmp_path / "fs.img", tmp_path / "data"
    with open(img, "wb") as f:
        f.truncate(32 << 20)
    run(["mkfs.ext4", "-q", "-F", img])
    data.write_bytes(b"\xa5" * 10000)
    run(["debugfs", "-w", "-R", f"write {data} f2", img])
    what = zero_durable_block(img, "ext4", oracle_for("f2", 10000), "crashlab:sync:1", True)
    assert what is not None and "/f2" in what
    out = tmp_path / "out"
    run(["debugfs", "-R", f"dump /f2 {out}", img])
    got = out.read_bytes()
    # a small image has 1 KiB blocks: the first one of the file is zeros now
    assert (
        len(got) == 10000 and got[:1024] == bytes(1024) and got[1024:] == data.read_bytes()[1024:]
    )
    assert zero_durable_block(img, "ext4", oracle_for("f2", 0), "crashlab:sync:1", True) is None


def test_only_ext(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="ext2/3/4"):
        zero_durable_block(tmp_path / "x", "xfs", oracle_for("f", 1), "crashlab:sync:1", True)
