"""``scenario check-log`` with guest checks, on the recorded fixture: a few FUA states
mounted in one guest, judged by fsck and mount as a log from elsewhere is (the fixture's
oracle is of an older format the guest refuses; about 20 s under TCG)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.cli import checklog
from harness.cli.main import build_parser
from harness.experiments import lifecycle
from harness.image import build as image
from harness.store.db import Store

pytestmark = pytest.mark.vm


def test_states_of_a_given_log_are_mounted_and_verified_in_a_guest(
    ext4_small: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if image.cached() is None:
        pytest.skip("guest image not built")
    monkeypatch.setenv("CRASHLAB_WORK", str(tmp_path / "work"))
    argv = [str(ext4_small[0]), "--fs", "ext4", "--device-size", "32M"]
    argv += ["--mkfs-options", "-J size=1", "--mount-options", "noinit_itable"]
    argv += ["--states", "fua", "--max-states", "4"]
    sc = checklog.build(build_parser().parse_args(["check-log", *argv]))
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    assert r.status == 0 and r.items == 4 and dict(r.counts) == {"consistent": 4}
    assert "fsck and mount only" in (r.experiment.caveat() or "")
    with Store.open(db, create=False) as st:
        detail = st.run_detail(r.run_id)
    for s in detail.states:
        stages = {c.stage for c in s.checks if c.checker != "reused"}
        assert stages in ({"host", "guest"}, set()), s
    guest = [c for s in detail.states for c in s.checks if c.stage == "guest"]
    assert guest and all(c.checker == "mount+verify" for c in guest)
