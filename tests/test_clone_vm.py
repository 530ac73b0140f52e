"""The op issue 45 added through the op table, run for real: FICLONE in a guest on btrfs
and xfs, every mark state judged by rule 19 -- clean with the real fsync, data lost
where the workload's fsync does nothing (a positive control: the rule can fail)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import scenario
from harness.experiments import lifecycle
from harness.image import build as image

pytestmark = pytest.mark.vm


@pytest.mark.parametrize(
    "sets, clean",
    [
        ([], True),
        (["fs.type=xfs", "fs.disk_size=320M"], True),
        (["workload.noop_sync=true", "expect=findings"], False),
    ],
    ids=["btrfs", "xfs", "btrfs-noop-fsync"],
)
def test_a_clone_is_judged_by_rule_19(
    guest_image: image.Image, tmp_path: Path, sets: list[str], clean: bool
) -> None:
    sc = scenario.load("clone-fsync", sets)
    report = lifecycle.execute(sc, db=tmp_path / "lab.sqlite")
    counts = report.counts
    assert not {"harness_error", "timeout", "panic"} & {k for k, v in counts.items() if v}
    if clean:
        assert report.status == 0 and counts.get("consistent", 0) >= 5, counts
    else:
        assert counts.get("data_loss", 0) > 0, counts
