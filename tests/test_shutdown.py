"""A crash by shutdown (FS_IOC_SHUTDOWN; harness/model/ops.py, crash.method): what each
flag promises in the oracle, the workload file and scenario checks, and the guard that
keeps the ioctl off the host. The model runs without the ioctl (a host cannot shut its
own filesystem down): each test builds the tree a state would hold by hand. The real
runs are in tests/test_shutdown_vm.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.config import scenario
from harness.errors import InputError
from harness.fstests.gen import _checks
from harness.guest import opgen
from harness.model import opfile, oracle
from harness.model.ops import ENDS, PERSIST_OPS, Op
from harness.model.oracle import rules
from harness.model.oracle.marks import Tracker
from harness.model.shell import FSTESTS, spell

KNOWN = Path(__file__).resolve().parent.parent / "campaigns" / "known-bugs"


def model_run(ops: list[Op]) -> dict[str, Any]:
    """The oracle opgen.execute would write for ``ops``, without running them."""
    track = Tracker(fsync_names=True)
    log = []
    for i, op in enumerate(ops):
        track.before(op)
        track.after(op)
        log.append({"i": i, **op.describe()})
        if op.kind in PERSIST_OPS:
            text = track.next_mark()
            track.mark(text, i)
            log[-1]["mark"] = text
    assert ops[-1].kind in ENDS
    return {"format": oracle.FORMAT, "profile": track.profile, "marks": track.marks(),
            "final_mark": log[-1]["mark"], "ops": log}  # fmt: skip


BEFORE = [Op("mkdir", "d"), Op("create", "d/keep"), Op("write", "d/keep", data=b"k" * 100),
          Op("fsync", "d/keep"), Op("create", "d/a"), Op("write", "d/a", data=b"a" * 50),
          Op("create", "b"), Op("unlink", "d/keep")]  # fmt: skip


def tree(root: Path, names: dict[str, bytes]) -> str:
    for name, data in names.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return str(root)


def test_logflush_requires_every_name_not_the_data(tmp_path: Path) -> None:
    o = model_run([*BEFORE, Op("shutdown_logflush")])
    last = o["marks"][-1]
    assert last["named"] == ["d/a"]  # made, written, never synced: the name only
    assert last["files"]["b"]["size"] == 0  # never written: empty is all it can be (rule 10)
    assert "d/keep" in last["absent"] and "d/a" not in last["files"]
    # Any content passes (a delayed allocation's data may be gone) ...
    ok = tree(tmp_path / "ok", {"d/a": b"", "b": b""})
    assert oracle.verify(ok, o, "crashlab:umount").ok
    # ... a lost name does not: rule 1's, "file-missing".
    lost = tree(tmp_path / "lost", {"b": b""})
    (tmp_path / "lost" / "d").mkdir()
    v = oracle.verify(lost, o, "crashlab:umount")
    assert not v.ok and v.missing == ["d/a"] and rules.broken(v)[0].name == "file-missing"
    assert v.promise == "fsync-names"  # the filesystem's word: POSIX has no shutdown
    # The removal the log holds is durable too: d/keep back is a finding.
    back = tree(tmp_path / "back", {"d/a": b"", "b": b"", "d/keep": b"k" * 100})
    assert oracle.verify(back, o, "crashlab:umount").present == ["d/keep"]


def test_nologflush_promises_only_what_was_synced_before(tmp_path: Path) -> None:
    o = model_run([Op("mkdir", "d"), Op("sync"), *BEFORE[1:4], Op("create", "b"),
                   Op("shutdown_nologflush")])  # fmt: skip
    last = o["marks"][-1]
    assert "named" not in last and set(last["files"]) == {"d/keep"}
    assert oracle.verify(tree(tmp_path / "s", {"d/keep": b"k" * 100}), o, "crashlab:umount").ok


def test_the_default_shutdown_freezes_first_so_it_is_a_sync(tmp_path: Path) -> None:
    o = model_run([*BEFORE, Op("shutdown")])
    last = o["marks"][-1]
    assert set(last["files"]) == {"b", "d/a"} and last["files"]["d/a"]["size"] == 50
    short = tree(tmp_path / "s", {"d/a": b"a" * 10, "b": b""})
    v = oracle.verify(short, o, "crashlab:umount")
    assert not v.ok and [m.path for m in v.mismatched] == ["d/a"]


def test_the_known_bug_steps_parse_and_end_with_the_shutdown() -> None:
    ops = opfile.parse((KNOWN / "ext4-logflush-shutdown.ops").read_text(), "ext4")
    assert ops[-1]["op"] == "shutdown_logflush"


@pytest.mark.parametrize(
    ("text", "fs", "said"),
    [
        ("create a\nshutdown_logflush\ncreate b\n", "ext4",
         "line 3: create: an op after shutdown_logflush"),
        ("create a\nshutdown\n", "btrfs", "line 2: shutdown: btrfs cannot do shutdown"),
    ],
)  # fmt: skip
def test_an_op_after_a_shutdown_or_one_on_btrfs_is_refused(text: str, fs: str, said: str) -> None:
    with pytest.raises(opfile.OpFileError) as e:
        opfile.parse(text, fs)
    assert str(e.value).startswith(said)


def test_crash_method_is_checked_against_the_filesystem_and_the_workload() -> None:
    sc = scenario.load("ext4-ordered-fsync", ["crash.method=shutdown-logflush"])
    assert sc.crash.end_op() == "shutdown_logflush"
    with pytest.raises(InputError) as e:
        scenario.load("btrfs-fsync", ["crash.method=shutdown"])
    assert "crash.method" in e.value.message and "btrfs has no shutdown ioctl" in e.value.message
    with pytest.raises(InputError) as e:
        scenario.load("ext4-fio", ["crash.method=shutdown"])
    assert "ends the op workloads" in e.value.message
    with pytest.raises(InputError) as e:
        scenario.load("ext4-ordered-fsync", ["crash.method=halt"])
    assert (
        "crash.method" in e.value.message
        and "power-cut" in str(e.value.hint or "") + e.value.message
    )


def test_the_ioctl_is_refused_outside_a_lab_guest(tmp_path: Path) -> None:
    body = opgen.execute(str(tmp_path), [Op("create", "a"), Op("shutdown_nologflush")])
    assert not body["complete"] and "runs only in a crashlab guest" in body["error"]
    assert (tmp_path / "a").exists()  # the ops before it ran; the host's filesystem did not stop


def test_fstests_spell_the_log_flags_as_scratch_shutdown_does() -> None:
    assert (
        spell(Op("shutdown_logflush"), FSTESTS) == '$XFS_IO_PROG -x -c "shutdown -f" $SCRATCH_MNT'
    )
    assert spell(Op("shutdown_nologflush"), FSTESTS) == '$XFS_IO_PROG -x -c "shutdown" $SCRATCH_MNT'
    prog, _ = _checks({"dirs": [], "files": {}, "absent": [], "named": ["d/a"]}, {})
    assert prog == ['[ -f $SCRATCH_MNT/d/a ] || echo "d/a is missing"']
