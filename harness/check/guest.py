"""Judging crash images inside a disposable guest: mount (the kernel's own journal or log
replay, timed), the oracle, umount, the checker again. Never on the host kernel.

A batch of images is attached to one guest. A state that hangs or panics the guest gets a
harness outcome (timeout / panic) of its own; the guest is replaced and the rest of the
batch goes on, so one bad state never costs the others their verdicts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.check.host import CheckResult
from harness.errors import GuestPanic, GuestTimeout, HarnessError
from harness.outcome import Outcome
from harness.record import recorder as record
from harness.vm.backend import Disk, Guest, GuestSpec, start_guest

log = logging.getLogger("crashlab.guestcheck")
ORACLE = f"{record.GUEST_DIR}/oracle.json"


@dataclass(frozen=True)
class Item:
    key: str  # the crash state id
    image: Path  # a disposable copy of its crash image
    mark: str | None  # the last mark at or before the state


def check_batch(
    items: Sequence[Item], fs: record.FsSpec, oracle: dict[str, Any] | None, *, timeout: float
) -> Iterator[tuple[str, CheckResult]]:
    """Yield (state id, guest check) for each item, as soon as each is known."""
    todo = list(items)
    while todo:
        spec = GuestSpec(
            disks=tuple(Disk(it.image, f"s{i}") for i, it in enumerate(todo)),
            command_timeout=timeout,
        )
        failed_at: int | None = None
        try:
            with start_guest(spec) as guest:
                _prepare(guest, oracle)
                for i, it in enumerate(todo):
                    try:
                        yield it.key, _check_one(guest, f"s{i}", it, fs, oracle, timeout)
                    except (GuestTimeout, GuestPanic) as e:
                        kind = Outcome.TIMEOUT if isinstance(e, GuestTimeout) else Outcome.PANIC
                        yield (
                            it.key,
                            CheckResult(
                                "guest",
                                "mount+verify",
                                kind,
                                None,
                                0.0,
                                f"{e.message}\n{e.console[-1200:]}",
                            ),
                        )
                        failed_at = i
                        break
        except HarnessError as e:
            if failed_at is not None:
                pass  # the guest died with the state already reported; start another
            else:
                # The guest itself could not be started or driven: every remaining state
                # is a harness error, never a filesystem finding.
                for it in todo:
                    yield (
                        it.key,
                        CheckResult(
                            "guest",
                            "mount+verify",
                            Outcome.HARNESS_ERROR,
                            None,
                            0.0,
                            f"{e.message}\n{e.detail or ''}"[-1500:],
                        ),
                    )
                return
        todo = todo[failed_at + 1 :] if failed_at is not None else []


def _prepare(guest: Guest, oracle: dict[str, Any] | None) -> None:
    record.install_scripts(guest)
    if oracle:
        guest.write_file(ORACLE, json.dumps(oracle).encode())


def _check_one(
    guest: Guest,
    serial: str,
    it: Item,
    fs: record.FsSpec,
    oracle: dict[str, Any] | None,
    timeout: float,
) -> CheckResult:
    argv = [
        "python3",
        f"{record.GUEST_DIR}/checkstate.py",
        "--dev",
        guest.disk(serial),
        "--fs",
        fs.type,
        "--mount-opts",
        ",".join(fs.mount_opts()),
        "--timeout",
        str(timeout),
    ]
    if oracle:
        argv += ["--oracle", ORACLE, "--mark", it.mark or ""]
    r = guest.run(argv, timeout=timeout * 4 + 30)
    if not r.ok:
        return CheckResult(
            "guest",
            "mount+verify",
            Outcome.HARNESS_ERROR,
            r.exitcode,
            r.seconds,
            (r.err or r.out)[-1500:],
            note="checkstate.py failed",
        )
    return judge(json.loads(r.out))


def judge(facts: dict[str, Any]) -> CheckResult:
    """Facts from checkstate.py -> one guest CheckResult. Failure is the default: only a
    clean mount, a passing oracle and a clean fsck make a state consistent."""
    phases: dict[str, float] = {}
    mount = facts["mount"]
    phases["mount"] = mount["seconds"]
    out = [mount["output"]]
    if mount["rc"] != 0:
        outcome = Outcome.TIMEOUT if "[timed out]" in mount["output"] else Outcome.MOUNT_FAILED
        return CheckResult(
            "guest", "mount", outcome, mount["rc"], mount["seconds"], "\n".join(out)[-1500:], phases
        )
    verify = facts.get("verify")
    if "umount" in facts:
        phases["umount"] = facts["umount"]["seconds"]
    fsck = facts["fsck"]
    phases["fsck_after"] = fsck["seconds"]
    out.append(fsck["output"])
    if fsck["rc"] == 0:
        outcome = Outcome.CONSISTENT
    else:
        again = facts.get("fsck_after_repair", {})
        phases["repair"] = facts.get("repair", {}).get("seconds", 0.0)
        outcome = Outcome.REPAIRED if again.get("rc") == 0 else Outcome.UNREPAIRABLE
    note = ""
    if verify is not None and not verify.get("ok", False):
        outcome = Outcome.DATA_LOSS
        note = json.dumps({k: verify.get(k) for k in ("mark", "missing", "mismatched", "error")})[
            :1500
        ]
        out.insert(0, "oracle: " + note)
    return CheckResult(
        "guest",
        "mount+verify",
        outcome,
        fsck["rc"],
        sum(phases.values()),
        "\n".join(o for o in out if o)[-1500:],
        phases,
        note=note,
    )
