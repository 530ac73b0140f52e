"""harness/guest/runner.py: the one command runner of the guest programs (run here on
the host: it is stdlib only)."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from harness.guest import runner
from harness.model import contract, kernlog

GUEST = Path(runner.__file__).parent


def test_a_command_s_record() -> None:
    r = runner.run(["sh", "-c", "echo out; echo err >&2; exit 3"], 30)
    assert (r.rc, r.stdout, r.stderr, r.timed_out) == (3, "out\n", "err\n", False)
    rec = r.record()
    assert rec.argv[0] == "sh" and rec.rc == 3 and rec.output == "out\nerr\n"
    assert isinstance(rec.seconds, float)
    # one tail for every program: the contract's
    long = runner.run(["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x"], 30).record()
    assert len(long.output) == contract.EXCERPT


def test_merge_keeps_the_order_the_command_printed_in() -> None:
    r = runner.run(["sh", "-c", "echo a; echo b >&2; echo c"], 30, merge=True)
    assert r.stdout == "a\nb\nc\n" and r.stderr == ""


def test_a_timeout_kills_and_says_so_with_the_output_so_far() -> None:
    t0 = time.monotonic()
    r = runner.run(["sh", "-c", "echo started; exec sleep 30"], 0.3)
    assert time.monotonic() - t0 < 10
    assert r.rc == -1 and r.timed_out and r.stdout == "started\n"
    # check/guest.py reads a timed-out mount by this marker
    assert runner.TIMED_OUT in r.record().output


def test_the_environment_keeps_udev_out_of_dmsetup() -> None:
    r = runner.run([sys.executable, "-c", "import os; print(os.environ['DM_DISABLE_UDEV'])"])
    assert r.stdout.strip() == "1"


def test_every_guest_program_that_runs_commands_uses_the_runner() -> None:
    # install_scripts copies the whole folder, so runner.py is beside each program there.
    for path in sorted(GUEST.glob("*.py")):
        text = path.read_text()
        # any use: ioprobe's blktrace once ran under a Popen of its own, past this test
        if path.name != "runner.py" and "subprocess" in text:
            raise AssertionError(f"{path.name} runs a command itself; use runner.run/start")


def test_a_command_left_running_is_stopped_by_its_signal_with_its_output() -> None:
    """blktrace's way (harness/guest/ioprobe.py): started, left running, stopped by SIGINT."""
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *_: (print('flushed'), sys.exit(0)))\n"
        "print('tracing', flush=True)\n"
        "time.sleep(30)\n"
    )
    started = runner.start([sys.executable, "-c", code])
    time.sleep(0.5)
    r = started.stop(timeout=10)
    assert (r.rc, r.timed_out) == (0, False) and r.stdout.split() == ["tracing", "flushed"]


# Kernel lines in the 6.1 kernel's own formats (block/blk-mq.c blk_print_req_error,
# fs/buffer.c buffer_io_error, drivers/md/dm-log-writes.c log_end_io), as dmesg prints them.
REQ = "op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 2"
HOST_FAILED = f"[   41.200311] I/O error, dev vdc, sector 3 {REQ}"
BUFFER = "[   41.200420] Buffer I/O error on dev vdb, logical block 0, async page read"
LOST_LOG = "[   41.200500] device-mapper: log-writes: Error writing log block, error=10"
FAULT = f"[   41.300000] I/O error, dev dm-0, sector 8 {REQ}"
FS_ERROR = (
    "[   41.400000] EXT4-fs error (device vdb): ext4_lookup:1855: inode #2: comm ls: bad inode"
)


def test_a_virtio_disk_the_host_failed_is_told_apart_from_injected_faults_and_fs_errors() -> None:
    kmsg = [FAULT, HOST_FAILED, FS_ERROR, BUFFER, LOST_LOG]
    assert kernlog.disk_errors(kmsg) == [HOST_FAILED, BUFFER]
    assert kernlog.log_writes_errors(kmsg) == [LOST_LOG]
    assert kernlog.disk_errors([FAULT, FS_ERROR]) == []


def test_a_check_under_a_failed_disk_is_the_lab_s_failure_even_if_the_mount_failed() -> None:
    from harness.check.guest import judge
    from harness.outcome import Outcome

    said = contract.Command(argv=["mount"], rc=32, seconds=0.1, output="mount: wrong fs type")
    refused = contract.CheckFacts(mount=said)
    assert judge(refused).outcome is Outcome.MOUNT_FAILED
    r = judge(replace(refused, disk_errors=[HOST_FAILED]))
    assert r.outcome is Outcome.HARNESS_ERROR and "dev vdc" in r.output
