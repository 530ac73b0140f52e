"""What a guest kernel's messages say about the lab's own disks (stdlib only: a guest
program reads its kernel log with these words, the host a guest's ``dmesg`` with the
same ones).

A line of either list is the lab's failure, never a filesystem's verdict: a disk the
host failed under the guest, or a dm-log-writes log with a gap.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# The block layer's words for a request a disk failed ("I/O error, dev vdc, sector 3 ...",
# "Buffer I/O error on dev vdb, ..."), on a virtio disk: in the lab's guests each is a
# host file no fault is injected under (faults go through dm-flakey / dm-dust, dm-N), so
# an error there is the host's -- never the filesystem's verdict to give.
_DISK_ERROR = re.compile(r"error,? (?:on )?dev (vd[a-z]+)")
# A workload's recording failed because a guest disk did (the host's file), not the
# workload: ``AceRecord.error``, and the search records it once more (search/experiment.py).
DISK_FAILED = "a disk failed"


def disk_errors(kmsg: Iterable[str]) -> list[str]:
    """The kernel lines of ``kmsg`` that say a guest's virtio disk failed a request."""
    return [line for line in kmsg if _DISK_ERROR.search(line)][:20]


# What dm-log-writes says when it stops logging (its DMERRs, drivers/md/dm-log-writes.c):
# a write error, no memory, or "Ran out of space on the logdev".
_LOG_ERRORS = ("error", "couldn't", "ran out of space")


def log_writes_errors(kmsg: Iterable[str]) -> list[str]:
    """The kernel lines of ``kmsg`` in which dm-log-writes says it lost entries: it says
    so nowhere else, and a log with a gap cannot be cut into crash states."""
    return [ln for ln in kmsg if "log-writes" in ln and any(w in ln.lower() for w in _LOG_ERRORS)]
