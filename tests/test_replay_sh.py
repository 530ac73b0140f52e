"""A triage report's ``replay.sh`` rebuilds the crash state with fstests' own
``replay-log``, byte for byte the image the lab judged.

``tests/data/logs/ext4-ops-small.replay-log.json`` was made by running each state's
``replay.sh`` with the real ``replay-log`` (built from an xfstests checkout's
``src/log-writes``) onto a zeroed image and keeping the script's commands and the image's
sha256; ``python tests/test_replay_sh.py REPLAY_LOG`` makes it again. The test checks that
the script generated now is the one replay-log ran, and that the lab's replayer gives the
image replay-log gave. With ``replay-log`` on ``PATH`` (or ``CRASHLAB_REPLAY_LOG``), it
also runs the scripts for real.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.record.logwrites import Log, open_log
from harness.replay import crashstates
from harness.replay.replayer import Replayer
from harness.triage import report

DATA = Path(__file__).parent / "data" / "logs"
FIXTURE = DATA / "ext4-ops-small.replay-log.json"
# Dropped writes (reorder), a torn write (its kept sectors by dd), and plain prefixes.
SPECS: list[dict[str, object]] = [
    {"kind": "fua"},
    {"kind": "reorder", "max_states": 20},
    {"kind": "torn", "max_states": 20},
]


def _states(lg: Log) -> list[crashstates.CrashState]:
    states = crashstates.generate(lg, SPECS, 1)
    return (
        [s for s in states if s.dropped][:6]
        + [s for s in states if s.torn is not None][:6]
        + [s for s in states if not s.dropped and s.torn is None][:4]
    )


def _script(s: crashstates.CrashState, lg: Log, size: int) -> str:
    fs = SimpleNamespace(mount_argv=lambda dev, mnt: ["mount", dev, mnt])
    r: Any = SimpleNamespace(state=s, target=SimpleNamespace(log_path="LOG", size=size, fs=fs))
    return report.replay_script(r, lg)


def _commands(script: str) -> list[str]:
    return [ln for ln in script.splitlines() if ln.startswith(("replay-log ", "dd "))]


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Log, Path, int]]:
    d = tmp_path_factory.mktemp("replaysh")
    path = d / "log.raw"
    path.write_bytes(gzip.decompress((DATA / "ext4-ops-small.log.gz").read_bytes()))
    size = json.loads((DATA / "ext4-ops-small.json").read_text())["device_size"]
    with open_log(path) as lg:
        yield lg, path, size


def _lab_digest(lg: Log, s: crashstates.CrashState, size: int, img: Path) -> str:
    with Replayer(lg, img, size) as rp:
        for _ in rp.walk([s]):
            return hashlib.sha256(rp.image.read_bytes()).hexdigest()
    raise AssertionError(f"state {s.id} was not materialised")


def _peer_digest(peer: str, script: str, log: Path, size: int, d: Path) -> str:
    (d / "replay.sh").write_text(script)
    img = d / "peer.img"
    img.unlink(missing_ok=True)
    img.touch()
    os.truncate(img, size)
    env = {**os.environ, "PATH": f"{Path(peer).parent}:{os.environ['PATH']}", "LOG": str(log)}
    subprocess.run(["sh", d / "replay.sh", img], env=env, check=True, capture_output=True)
    return hashlib.sha256(img.read_bytes()).hexdigest()


def test_replay_sh_is_what_replay_log_ran_and_gives_the_labs_image(
    log: tuple[Log, Path, int], tmp_path: Path
) -> None:
    lg, _, size = log
    recorded = json.loads(FIXTURE.read_text())["states"]
    states = _states(lg)
    assert [s.id for s in states] == [r["id"] for r in recorded]
    kinds = {
        ("reorder" if s.dropped else "torn" if s.torn is not None else "prefix") for s in states
    }
    assert kinds == {"reorder", "torn", "prefix"}
    for s, rec in zip(states, recorded, strict=True):
        assert _commands(_script(s, lg, size)) == rec["commands"], s.id
        assert _lab_digest(lg, s, size, tmp_path / "lab.img") == rec["sha256"], s.id


def _peer() -> str | None:
    return os.environ.get("CRASHLAB_REPLAY_LOG") or shutil.which("replay-log")


@pytest.mark.skipif(_peer() is None, reason="fstests' replay-log is not installed")
def test_replay_sh_runs_with_the_real_replay_log(
    log: tuple[Log, Path, int], tmp_path: Path
) -> None:
    lg, path, size = log
    peer = _peer()
    assert peer is not None
    for s in _states(lg):
        want = _lab_digest(lg, s, size, tmp_path / "lab.img")
        assert _peer_digest(peer, _script(s, lg, size), path, size, tmp_path) == want, s.id


def record(peer: str) -> None:
    """Run every state's replay.sh with the real replay-log and keep what it gave."""
    d = Path(os.environ.get("TMPDIR", "/tmp")) / "crashlab-replaysh"
    d.mkdir(exist_ok=True)
    path = d / "log.raw"
    path.write_bytes(gzip.decompress((DATA / "ext4-ops-small.log.gz").read_bytes()))
    size = json.loads((DATA / "ext4-ops-small.json").read_text())["device_size"]
    out = []
    with open_log(path) as lg:
        for s in _states(lg):
            script = _script(s, lg, size)
            digest = _peer_digest(peer, script, path, size, d)
            out.append({"id": s.id, "commands": _commands(script), "sha256": digest})
    note = f"made by `python tests/test_replay_sh.py {peer}` (fstests replay-log)"
    FIXTURE.write_text(json.dumps({"note": note, "states": out}, indent=1) + "\n")
    shutil.rmtree(d)


if __name__ == "__main__":
    record(sys.argv[1])
