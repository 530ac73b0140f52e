"""A guest program started once and asked once per request: the loop every such program
runs (harness/guest/fifoserve.py), the host's start and ask (harness/record/guestserve.py)
run on this host through a shell as the guest runs them, and ``ace.py serve``'s requests.
No guest is booted and nothing is recorded: ``cmd_record`` is replaced where it would run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.config.crash import FsSpec
from harness.crashstate import workloads
from harness.errors import GuestMessageError, HarnessError
from harness.guest import ace
from harness.model import contract
from harness.record import guestserve
from harness.record import recorder as record
from harness.vm.agent import ExecResult

GUEST = Path(ace.__file__).parent

# A program served as the guest's are: words answered in upper case; ``boom`` raises;
# ``leak`` leaves a file and a pipe open and names their descriptors, which ``open?``
# asks about; ``quit`` ends it (the loop itself never returns).
ECHO = """
import os, sys
import fifoserve

def handle(line):
    word, *rest = line.split()
    if word == "quit":
        os._exit(0)
    if word == "boom":
        raise ValueError("boom")
    if word == "leak":
        fd = os.open(__file__, os.O_RDONLY)
        r, w = os.pipe()
        return f"{fd} {r} {w}"
    if word == "open?":
        return " ".join(str(os.path.exists(f"/proc/self/fd/{fd}")) for fd in rest)
    return word.upper()

fifoserve.serve(sys.argv[-1], handle, lambda text: "failed: " + text.splitlines()[-1])
"""


class Local:
    """A "guest" that runs its commands on this host (a shell is all they need)."""

    def run(
        self, argv: Sequence[str], *, timeout: float | None = None, check: bool = False
    ) -> ExecResult:
        p = subprocess.run(list(argv), capture_output=True, timeout=timeout, check=check)
        return ExecResult(list(argv), p.returncode, p.stdout, p.stderr, 0.0)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """``ECHO`` started by ``guestserve.start`` beside a copy of the guest programs;
    yields its ask."""
    scripts = tmp_path / "scripts"
    shutil.copytree(GUEST, scripts, ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "echo.py").write_text(ECHO)
    monkeypatch.setattr(record, "GUEST_DIR", str(scripts))
    folder = str(tmp_path / "server")
    guest: Any = Local()
    guestserve.start(guest, folder, "echo.py", ["--an-argument"])

    def ask(line: str) -> str:
        r = guestserve.ask(guest, folder, line, timeout=30)
        assert r.ok, r.err
        return r.out

    try:
        yield ask
    finally:  # end it, if it is still there to read a request
        with contextlib.suppress(OSError):
            fd = os.open(f"{folder}/req", os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"quit\n")
            os.close(fd)


def test_requests_are_answered_in_order_and_a_failure_is_an_answer(
    served: Callable[[str], str],
) -> None:
    assert served("one") == "ONE"
    assert served("two") == "TWO"
    assert served("boom") == "failed: ValueError: boom"
    assert served("three") == "THREE"  # the loop went on


def test_a_file_a_request_left_open_is_closed_and_a_pipe_is_not(
    served: Callable[[str], str],
) -> None:
    fd, r, w = served("leak").split()
    assert served(f"open? {fd} {r} {w}") == "False True True"


def _request(**extra: str) -> list[str]:
    argv = ["--name", "crashlab-ace", "--dut", "/dev/vdb", "--dut-offset", "0"]
    argv += ["--size", "1048576", "--log", "/dev/vdc", "--log-offset", "0"]
    argv += ["--log-size", "2097152", "--mkfs", '["mkfs.ext4"]', "--mount", '["mount"]']
    argv += ["--root", "/mnt/test", "--index", "7", "--seq", "2"]
    for k, v in extra.items():
        argv += [f"--{k.replace('_', '-')}", v]
    return argv


def _recorded(a: Any) -> contract.AceRecord:
    return contract.AceRecord(index=a.index, status="recorded", seconds=0.5, oracle={"a": 1})


def test_ace_serve_records_a_request_as_ace_py_record_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop: dict[str, Any] = {}
    monkeypatch.setattr(ace.fifoserve, "serve", lambda folder, h, f: loop.update(h=h, f=f))
    monkeypatch.setattr(ace, "cmd_record", _recorded)
    ace.serve("/nonexistent")
    said = contract.AceRecord.from_json(loop["h"](json.dumps(_request()) + "\n"))
    assert said == _recorded(ace.build_parser().parse_args(["record", *_request()]))
    # a request ace.py record would refuse names what it lacks
    with pytest.raises(ValueError, match="--index"):
        loop["h"](json.dumps(_request()[:-4]))
    failed = contract.AceRecord.from_json(loop["f"]("Traceback ...\nValueError: no --index"))
    assert (failed.status, failed.index) == ("failed", -1)
    assert failed.error.endswith("ValueError: no --index")


def test_a_request_parses_as_the_one_shot_command_line() -> None:
    a = ace.record_args(_request(source='{"kind": "ace"}', keep=""))
    b = ace.build_parser().parse_args(["record", *_request(source='{"kind": "ace"}', keep="")])
    assert a == b and a.keep == "" and a.index == 7 and a.noop_sync is False


def test_ace_py_record_still_prints_its_record(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ace, "cmd_record", _recorded)
    assert ace.main(["record", *_request()]) == 0
    assert contract.AceRecord.from_json(capsys.readouterr().out).index == 7


class Recorder:
    """The recording guest as record_batch drives it: the server's start and each ask,
    answered with ``answer(request argv)``."""

    def __init__(self, answer: Callable[[list[str]], ExecResult]) -> None:
        self.answer = answer
        self.started: list[list[str]] = []
        self.asked: list[tuple[list[str], float | None]] = []

    def boot_seconds(self) -> float:
        return 1.0

    def disk(self, serial: str) -> str:
        return f"/dev/disk/by-id/virtio-{serial}"

    def write_file(self, path: str, data: bytes) -> None:
        pass

    def run(
        self, argv: Sequence[str], *, timeout: float | None = None, check: bool = False
    ) -> ExecResult:
        argv = list(argv)
        if argv[:3] == ["sh", "-c", guestserve.START]:
            self.started.append(argv)
        elif argv[:3] == ["sh", "-c", guestserve.ASK]:
            self.asked.append((json.loads(argv[4]), timeout))
            return self.answer(json.loads(argv[4]))
        out = b"/dev/vdb\n" if argv[0] == "readlink" else b""
        return ExecResult(argv, 0, out, b"", 0.0)


def _batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guest: Recorder, n: int) -> None:
    @contextlib.contextmanager
    def start_guest(spec: Any) -> Iterator[Any]:
        yield guest

    monkeypatch.setattr(workloads, "start_guest", start_guest)
    ws = [{"id": f"seq1-{i:06d}", "index": i, "seq": 1} for i in range(n)]
    fs = FsSpec(type="ext4", disk_size="64M")
    workloads.record_batch(tmp_path, fs, ws, timeout=10, noop_sync=False, progress=print)


def _reply(status: str) -> Callable[[list[str]], ExecResult]:
    def answer(argv: list[str]) -> ExecResult:
        index = int(argv[argv.index("--index") + 1])
        said = contract.AceRecord(index=index, status=status, seconds=0.1).to_json()
        return ExecResult([], 0, said.encode(), b"", 0.1)

    return answer


def test_a_batch_starts_one_recorder_and_asks_it_once_a_workload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guest = Recorder(_reply("unsupported"))
    _batch(tmp_path, monkeypatch, guest, 3)
    assert len(guest.started) == 1 and guest.started[0][5:] == [
        f"{record.GUEST_DIR}/ace.py",
        "serve",
    ]
    assert [t for _, t in guest.asked] == [20, 20, 20]  # the one-shot command's timeout
    offsets = [int(argv[argv.index("--dut-offset") + 1]) for argv, _ in guest.asked]
    assert offsets == [0, 64 << 20, 128 << 20]
    for i, (argv, _) in enumerate(guest.asked):  # what ace.py record would have been given
        assert ace.record_args(argv).index == i
    for i in range(3):
        assert workloads.load(tmp_path, f"seq1-{i:06d}") is not None


def test_a_failed_or_unreadable_ask_fails_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(argv: list[str]) -> ExecResult:
        return ExecResult([], 1, b"", b"sh: can't create /tmp/crashlab/recorder/req", 0.1)

    with pytest.raises(HarnessError, match="failed in the guest") as e:
        _batch(tmp_path, monkeypatch, Recorder(fails), 2)
    assert "can't create" in (e.value.detail or "")

    def garbled(argv: list[str]) -> ExecResult:
        return ExecResult([], 0, b"Traceback (most recent call last):", b"", 0.1)

    with pytest.raises(GuestMessageError, match=r"ace\.py serve"):
        _batch(tmp_path, monkeypatch, Recorder(garbled), 2)
