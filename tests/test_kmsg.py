"""The guest's kernel-log reader (harness/guest/runner.py ``Kmsg``) on this host's own
/dev/kmsg: what a check reads is what the kernel logged after the reader was made, in
dmesg's ``[seconds] message`` form, and nothing from before."""

from __future__ import annotations

import os
import uuid

import pytest

from harness.guest import runner
from harness.model import kernlog

pytestmark = pytest.mark.skipif(
    not os.access("/dev/kmsg", os.R_OK | os.W_OK), reason="needs root's /dev/kmsg"
)


def log(text: str) -> None:
    with open("/dev/kmsg", "w") as f:
        f.write(text + "\n")


def test_kmsg_reads_what_was_logged_since_it_was_made() -> None:
    before, after, later = (f"crashlab-test {uuid.uuid4().hex}" for _ in range(3))
    log(before)
    k = runner.Kmsg()
    try:
        assert k.read() == []
        log(after)
        lines = k.read()
        assert len(lines) == 1 and lines[0].endswith("] " + after)
        assert lines[0].startswith("[") and "." in lines[0].split("]")[0]
        log(later)
        assert [ln.split("] ", 1)[1] for ln in k.read()] == [after, later]
        assert not any(before in ln for ln in k.read())
        # the disk-error scan reads these lines as it read dmesg's
        log("crashlab-test: I/O error, dev vdc, sector 2048 op 0x1:(WRITE)")
        assert kernlog.disk_errors(k.read())[-1].endswith(
            "I/O error, dev vdc, sector 2048 op 0x1:(WRITE)"
        )
    finally:
        k.close()
