"""``results table journal``: a guest check keeps its mount's kernel messages at the end
of its output, whole however long the rest is, and the table says per state whether the
journal was replayed, refused or clean, grouped by the run's mount options. The message
texts are the kernel's own (fs/ext4/super.c "recovery complete", fs/jbd2/recovery.c
"JBD2: Invalid checksum recovering data block ...")."""

from __future__ import annotations

from pathlib import Path

from harness.check import guest as guestcheck
from harness.model.contract import CheckFacts
from harness.outcome import Outcome
from harness.report import journal as _journal  # noqa: F401  (registers the table)
from harness.report import query
from harness.store.db import CheckResult, CrashState, LogInfo, RunKind, RunStatus, Store
from tests.guestfacts import facts

REPLAYED = ["EXT4-fs (vdb): recovery complete", "EXT4-fs (vdb): mounted filesystem"]
REFUSED = [
    "JBD2: Invalid checksum recovering data block 1090 in journal",
    "EXT4-fs (vdb): error loading journal",
]


def _facts(kmsg: list[str], rc: int = 0) -> CheckFacts:
    mount = {"rc": rc, "seconds": 0.2, "output": "x" * 3000 if rc == 0 else "wrong fs type"}
    return facts(mount=mount, kmsg=kmsg)


def test_the_mounts_kernel_messages_end_the_output_whole() -> None:
    r = guestcheck.judge(_facts(REPLAYED))
    assert r.outcome is Outcome.CONSISTENT and len(r.output) <= 1500
    assert r.output.endswith("kernel: " + REPLAYED[-1])
    failed = guestcheck.judge(_facts(REFUSED, rc=32))
    assert failed.outcome is Outcome.MOUNT_FAILED and "kernel: " + REFUSED[0] in failed.output


def test_states_grouped_by_what_the_journal_recovery_did(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    log = LogInfo("feed", "/tmp/w.log", 10, 1, 3, 1, 0, 4096)
    with Store.open(db) as st:
        for opts, kmsgs in (
            ([], [REPLAYED, REPLAYED, []]),
            (["journal_checksum"], [REPLAYED, REFUSED]),
        ):
            params = {"fs": {"type": "ext4", "mount_options": opts}}
            run = st.begin_run("journal-checksum", RunKind.CRASH, params, 1, fs="ext4")
            st.add_log(log, run_id=run)
            for i, kmsg in enumerate(kmsgs):
                g = guestcheck.judge(_facts(kmsg, rc=32 if kmsg is REFUSED else 0))
                host = CheckResult("host", "e2fsck", Outcome.CONSISTENT, 0, 0.1)
                state = CrashState(f"torn-{i}", log.hash, "torn", i)
                st.record_state_result(run, state, [host, g], {})
            st.finish_run(run, RunStatus.DONE)
        table = query.grouped(st, "journal", ["mount_options", "recovery"])
    got = {g.key: dict(g.counts) for g in table.groups}
    assert got == {
        ("[]", "replayed"): {"consistent": 2},
        ("[]", "none"): {"consistent": 1},
        ('["journal_checksum"]', "replayed"): {"consistent": 1},
        ('["journal_checksum"]', "refused"): {"mount_failed": 1},
    }, got
