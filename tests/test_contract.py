"""harness/model/contract.py: every message between the guest programs and the host
round-trips, and one that breaks the contract -- a field unknown, missing, mistyped, of
another version, or no JSON at all -- is named as such; on the host it is a harness
failure (exit 3) naming the program, the field and what the guest printed, never a
finding and never a traceback."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from harness.check import guest as guestcheck
from harness.errors import EXIT_HARNESS, GuestMessageError
from harness.model import contract
from harness.model.contract import ContractError, Message
from harness.model.oracle import doc
from harness.outcome import Outcome
from harness.record import guestmsg
from harness.vm.agent import ExecResult
from tests.guestfacts import command, verdict

GUEST = Path(contract.__file__).parent
RAN = command(rc=0, output="ok")
USAGE = contract.Usage(
    files=3, dirs=1, inodes_used=15, inodes_total=64, blocks_used=9, block_size=4096
)
FACTS = contract.CheckFacts(
    dev="/dev/vdb",
    before_mount=None,
    mount=RAN,
    kmsg=["EXT4-fs (vdb): recovery complete"],
    verify=verdict(ok=False, missing=["d0/f1"]),
    classes=[{"target": "db", "violated": False}],
    umount=RAN,
    fsck=command(rc=4, output="damage"),
    repair=RAN,
    fsck_after_repair=RAN,
    modes=[
        contract.ModeFacts(mode="ro", mount=RAN, verify=verdict(ok=True), umount=RAN),
        contract.ModeFacts(mode="remount", mount=RAN, changed=["a"]),
    ],
)
LOST = contract.Verdict(
    mark="crashlab:sync:2",
    exact=True,
    known=True,
    checked=4,
    missing=["a"],
    mismatched=[contract.Mismatch(path="b", expected="e0", got="9f", size=1, expected_size=2)],
    present=["c"],
    nlink=[contract.NlinkMiss(path="d", nlink=2, expected=1)],
    ok=False,
    profile="fsync-names",
    promise="posix",
)
# One of each message, every field set to something other than its default.
SAMPLES: dict[type[Message], Message] = {
    contract.Command: RAN,
    contract.Step: RAN.as_step("mkfs"),
    contract.CheckRequest: contract.CheckRequest(
        dev="/dev/vdb",
        fs="ext4",
        mount_opts="data=journal",
        mountpoint="/mnt/x",
        oracle="/tmp/o.json",
        mark="crashlab:sync:2",
        exact=True,
        timeout=30.0,
        modes=["ro", "remount"],
    ),
    contract.CheckFacts: FACTS,
    contract.AceRecord: contract.AceRecord(
        index=7, status="recorded", seconds=1.5, oracle={"format": "x"}, error="", kernel=["k"]
    ),
    contract.FioPremise: contract.FioPremise(
        verdict=verdict(ok=True, blocks={"required": {"valid": 8}}, lost_blocks=0)
    ),
    contract.Verdict: LOST,
    contract.Call: contract.Call(errno=None, error="blocked", seconds=20.0),
    doc.OpEntry: doc.OpEntry(i=3, op="rename", path="a", dst="b", mark="crashlab:sync:1"),
    contract.ProbeStep: contract.ProbeStep(
        step="mkfs", argv=["mkfs"], rc=0, seconds=0.5, output="ok"
    ),
    contract.Mismatch: LOST.mismatched[0],
    contract.Meta: contract.Meta(mode=0o644, owner=[0, 0]),
    contract.Stamp: contract.Stamp(which="ctime", got=30, low=10, high=20),
    contract.ModeFacts: contract.ModeFacts(
        mode="ro-device", mount=RAN, verify=verdict(ok=True), umount=RAN, changed=[], error="x"
    ),
    contract.NlinkMiss: LOST.nlink[0],
    contract.ZfsRound: contract.ZfsRound(round=2, files={"f000": "ab"}, touched=["f000"]),
    contract.ZfsVerify: contract.ZfsVerify(ok=False, checked=3, missing=["f1"], mismatched=[]),
    contract.Usage: USAGE,
    contract.Populated: contract.Populated(
        mkfs=RAN, mount=RAN, fallocate=command(rc=1), populate_seconds=2.5, usage=USAGE
    ),
    contract.Churning: contract.Churning(pid=4242),
    contract.Stopped: contract.Stopped(stopped=True, was_running=True, seconds=0.2),
    contract.Replayed: contract.Replayed(
        mount=RAN, before_mount=RAN, usage=USAGE, umount=RAN, disk_errors=["x"], kernel_log=["y"]
    ),
    contract.WorkloadEnd: contract.WorkloadEnd(
        complete=False, error="op 3", final_mark="crashlab:sync:1"
    ),
    contract.DropPoint: contract.DropPoint(
        at=2,
        mark="crashlab:sync:2",
        steps=[RAN.as_step("mkfs")],
        workload=contract.WorkloadEnd(complete=True, error=None, final_mark=None),
        switched=True,
        check=FACTS,
        failed="",
    ),
    contract.DropResult: contract.DropResult(points=[]),
    contract.EioFacts: contract.EioFacts(
        steps=[contract.ProbeStep(step="fsync-1", errno=5, error="EIO", seconds=0.1)],
        kernel_log=["Buffer I/O error"],
    ),
    contract.DustFacts: contract.DustFacts(
        fs="zfs",
        commands={"create": RAN},
        layout="mirror",
        bad_disk=1,
        sha_before=["a"],
        sha_after=["a"],
        scrub_seconds=3.0,
        status="{}",
        file_block=9,
        read=contract.Call(errno=0, error="", value=4096, seconds=0.1),
    ),
    contract.IoFacts: contract.IoFacts(
        fs="btrfs",
        steps=[{"step": "fio", "rc": 0}],
        failed="",
        seconds=9.5,
        cpu={"busy_pct": 50.0},
        snapshots=[{"n": 1}],
        space={"df": "1 2 3"},
    ),
}


def _all_messages() -> set[type[Message]]:
    found: set[type[Message]] = set()
    todo = list(Message.__subclasses__())
    while todo:
        kind = todo.pop()
        found.add(kind)
        todo += kind.__subclasses__()
    return found


def test_every_message_has_a_sample() -> None:
    assert _all_messages() == set(SAMPLES)


@pytest.mark.parametrize("kind", SAMPLES, ids=lambda k: k.__name__)
def test_every_message_round_trips(kind: type[Message]) -> None:
    sample = SAMPLES[kind]
    assert isinstance(sample, kind)
    assert kind.from_json(sample.to_json()) == sample
    assert kind.from_dict(json.loads(json.dumps(sample.to_dict()))) == sample


@pytest.mark.parametrize("kind", SAMPLES, ids=lambda k: k.__name__)
def test_an_unknown_field_is_refused_by_name(kind: type[Message]) -> None:
    data = {**SAMPLES[kind].to_dict(), "surprise": 1}
    with pytest.raises(ContractError, match="unknown field") as e:
        kind.from_dict(data)
    assert e.value.field == f"{kind.__name__}.surprise"


@pytest.mark.parametrize("kind", SAMPLES, ids=lambda k: k.__name__)
def test_every_missing_field_is_refused_by_name(kind: type[Message]) -> None:
    """A sparse message (the oracle's verdict) may leave out what has a default."""
    data = SAMPLES[kind].to_dict()
    sparse = getattr(kind, "SPARSE", False)
    needed = [f.name for f in dataclasses.fields(kind) if not sparse or not _has_default(f)]
    for name in needed:  # a sparse message may need none (contract.Call)
        with pytest.raises(ContractError, match="missing field") as e:
            kind.from_dict({k: v for k, v in data.items() if k != name})
        assert e.value.field == f"{kind.__name__}.{name}"


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def test_a_verdict_keeps_the_shape_the_lab_always_stored() -> None:
    """Sparse: a mismatch says only what differed; a verdict stored before the contract
    typed it (an old store's JSON) reads back."""
    assert LOST.to_dict()["mismatched"] == [
        {"path": "b", "expected": "e0", "got": "9f", "size": 1, "expected_size": 2}
    ]
    old = {"mark": "crashlab:sync:1", "exact": False, "known": True, "checked": 2,
           "missing": [], "mismatched": [{"path": "f", "prefix": 4096, "size": 12}],
           "present": [], "nlink": [], "ok": False}  # fmt: skip
    v = contract.Verdict.from_dict(old)
    assert v.mismatched[0].prefix == 4096 and v.profile is None
    assert v.to_dict() == old


def test_a_nested_field_is_named_by_its_path() -> None:
    data = FACTS.to_dict()
    data["mount"] = {**data["mount"], "rc": "0"}
    with pytest.raises(ContractError, match="expected int") as e:
        contract.CheckFacts.from_dict(data)
    assert e.value.field == "CheckFacts.mount.rc"
    point = SAMPLES[contract.DropPoint].to_dict()
    point["steps"][0].pop("output")
    with pytest.raises(ContractError) as e:
        contract.DropPoint.from_dict(point)
    assert e.value.field == "DropPoint.steps[0].output"


def test_types_are_checked_not_coerced() -> None:
    data = RAN.to_dict()
    with pytest.raises(ContractError, match="expected a number"):
        contract.Command.from_dict({**data, "seconds": "1.5"})
    with pytest.raises(ContractError, match="expected int"):
        contract.Command.from_dict({**data, "rc": True})  # a bool is no exit status
    with pytest.raises(ContractError, match="expected a list"):
        contract.Command.from_dict({**data, "argv": "mount /dev/vdb"})
    with pytest.raises(ContractError, match="expected an object"):
        contract.CheckFacts.from_dict([])
    # JSON has one kind of number: a whole float is still a float
    assert contract.Command.from_dict({**data, "seconds": 2}).seconds == 2.0


def test_another_version_is_refused() -> None:
    data = {**SAMPLES[contract.Stopped].to_dict(), "version": contract.VERSION + 1}
    with pytest.raises(ContractError, match="this side reads") as e:
        contract.Stopped.from_dict(data)
    assert e.value.field == "Stopped.version"


def test_the_old_argv_request_is_refused_clearly() -> None:
    """A host that still sends checkstate an argv list gets an error, not a check."""
    with pytest.raises(ContractError, match="expected an object"):
        contract.CheckRequest.from_json(json.dumps(["--dev", "/dev/vdb", "--fs", "ext4"]))


@pytest.mark.parametrize(
    ("printed", "field"),
    [
        ("Traceback (most recent call last):\n  ...\nKeyError: 'rc'", "Stopped"),
        ('{"stopped": true, "was_running": true, "seconds": 0.1}', "Stopped.stuck"),
        ('{"stopped": true, "was_running": true, "seconds": 0.1, "stuck": ""}', "Stopped.version"),
        ('{"stopped": true, "was_running": true, "seconds": 0.1, "stuck": "", "version": '
         f'{contract.VERSION}, "x": 2}}', "Stopped.x"),
    ],
)  # fmt: skip
def test_an_unreadable_answer_is_a_harness_failure_naming_program_field_output(
    printed: str, field: str
) -> None:
    with pytest.raises(GuestMessageError) as e:
        guestmsg.read(contract.Stopped, "recoveryload.py stop", printed)
    err = e.value
    assert err.exit_status == EXIT_HARNESS
    assert (err.program, err.field) == ("recoveryload.py stop", field)
    assert err.message.startswith(
        f"recoveryload.py stop answered what the host cannot read: {field}"
    )
    assert printed[:40] in (err.detail or "")


def test_a_long_unreadable_answer_keeps_its_head_and_its_tail() -> None:
    printed = "{" + "x" * 5000 + "END"
    with pytest.raises(GuestMessageError) as e:
        guestmsg.read(contract.IoFacts, "ioprobe.py", printed)
    detail = e.value.detail or ""
    assert detail.count("x") < 1300 and "{x" in detail and detail.endswith("END")


class _Guest:
    """What check/guest._check_one asks of a guest: a disk's path and one command."""

    def __init__(self, out: str) -> None:
        self.out = out

    def disk(self, serial: str) -> str:
        return f"/dev/disk/by-id/virtio-{serial}"

    def run(self, argv: list[str], timeout: float) -> ExecResult:
        self.request = contract.CheckRequest.from_json(argv[4])
        return ExecResult(argv, 0, self.out.encode(), b"", 0.5)


def _checks(out: str) -> list[guestcheck.CheckResult]:
    from harness.config.crash import FsSpec

    it = guestcheck.Item("s1", Path("/nonexistent"), "crashlab:sync:1", exact=True)
    guest: Any = _Guest(out)
    modes = ("ro", "rw", "remount")
    r = guestcheck._check_one(guest, "s0", it, FsSpec(type="ext4"), True, 30.0, modes)
    assert guest.request.mark == "crashlab:sync:1" and guest.request.exact
    assert guest.request.modes == ["ro", "remount"]  # rw is the check itself
    return r


def _check(out: str) -> guestcheck.CheckResult:
    """The read-write mount's check: the first."""
    return _checks(out)[0]


def test_checkstate_facts_that_do_not_parse_are_that_states_harness_error() -> None:
    said = json.dumps({"mount": {"rc": 0}, "verify": {"ok": False}})
    r = _check(said)
    assert r.outcome is Outcome.HARNESS_ERROR  # never data_loss, though verify says not ok
    assert "checkstate.py answered what the host cannot read" in r.output
    assert '"verify"' in r.output  # what the guest printed


def test_a_state_checked_without_its_oracle_asks_for_no_mark() -> None:
    from harness.config.crash import FsSpec

    it = guestcheck.Item("s1", Path("/nonexistent"), "crashlab:sync:1", exact=True)
    guest = _Guest(FACTS.to_json())
    anyguest: Any = guest
    guestcheck._check_one(anyguest, "s0", it, FsSpec(type="ext4"), False, 30.0)
    asked = guest.request
    assert (asked.oracle, asked.mark, asked.exact) == ("", "", False)


def test_checkstate_facts_that_parse_are_judged() -> None:
    assert _check(FACTS.to_json()).outcome is Outcome.DATA_LOSS
    # One check a mode beside it: ro held what it must, the second mount changed "a".
    modes = {r.checker: r.outcome for r in _checks(FACTS.to_json())[1:]}
    assert modes == {"mount[ro]+verify": Outcome.CONSISTENT,
                     "mount[remount]+verify": Outcome.DATA_LOSS}  # fmt: skip
    serve = contract.CheckFacts(serve_error="Traceback ...\nValueError: boom").to_json()
    r = _check(serve)
    assert r.outcome is Outcome.HARNESS_ERROR and "boom" in r.output


def test_the_cli_exits_3_with_program_field_and_output_and_no_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import lab, main

    def unreadable(args: Any) -> int:
        said = {"steps": [], "kernel_log": "EIO", "version": contract.VERSION}
        guestmsg.read(contract.EioFacts, "eioprobe.py", json.dumps(said))
        return 0

    monkeypatch.setattr(lab, "cmd_list", unreadable)
    assert main.main(["list"]) == EXIT_HARNESS
    err = capsys.readouterr().err
    assert "eioprobe.py answered what the host cannot read: EioFacts.kernel_log" in err
    assert '"kernel_log": "EIO"' in err  # what it printed
    assert "Traceback" not in err
