"""harness/check/e2undo.py against e2undo itself, on real crash states: after e2fsck's
journal replay under ``-z``, both put the image back to the same bytes, which are the
bytes before the replay."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.check import e2undo
from harness.record.logwrites import open_log
from harness.replay import crashstates
from harness.replay.replayer import Replayer

DATA = Path(__file__).parent / "data" / "logs"
pytestmark = pytest.mark.skipif(shutil.which("e2undo") is None, reason="needs e2fsprogs")


def test_in_process_undo_equals_e2undo_on_every_fua_state(tmp_path: Path) -> None:
    log = tmp_path / "log.raw"
    log.write_bytes(gzip.decompress((DATA / "ext4-ops-small.log.gz").read_bytes()))
    size = json.loads((DATA / "ext4-ops-small.json").read_text())["device_size"]
    undone = 0
    with open_log(log) as lg, Replayer(lg, tmp_path / "img", size) as rp:
        states = crashstates.generate(lg, [{"kind": "fua"}])
        for _ in rp.walk(states):
            before = rp.image.read_bytes()
            ours, theirs, undo = tmp_path / "ours", tmp_path / "theirs", tmp_path / "u"
            shutil.copyfile(rp.image, ours)
            undo.unlink(missing_ok=True)
            argv = ["e2fsck", "-E", "journal_only", "-p", "-z", str(undo), str(ours)]
            subprocess.run(argv, capture_output=True, check=False)
            shutil.copyfile(ours, theirs)
            if ours.read_bytes() == before:
                continue  # nothing to replay
            keys = e2undo.restore(undo, ours)
            subprocess.run(["e2undo", str(undo), str(theirs)], capture_output=True, check=True)
            assert keys, "the undo file held no key"
            assert ours.read_bytes() == theirs.read_bytes() == before
            undone += 1
    assert undone >= 10  # 17 of the 18 states need recovery (tests/data/logs/README.md)


def test_a_file_it_does_not_trust_is_left_to_e2undo(tmp_path: Path) -> None:
    img = tmp_path / "img"
    img.write_bytes(b"\0" * 8192)
    bad = tmp_path / "u"
    bad.write_bytes(b"E2UNDO02" + b"\0" * 2000)  # state 0: not finished
    assert e2undo.restore(bad, img) is None
    bad.write_bytes(b"nonsense")
    assert e2undo.restore(bad, img) is None
    assert img.read_bytes() == b"\0" * 8192
