"""Judging crash images inside a disposable guest: mount (the kernel's own journal or log
replay, timed), the oracle, umount, the checker again. Never on the host kernel.

A batch of images is attached to one guest. A state that hangs or panics the guest gets a
harness outcome (timeout / panic) of its own; the guest is replaced and the rest of the
batch goes on, so one bad state never costs the others their verdicts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from harness.check.host import CheckResult
from harness.check.modecheck import judge_modes, mount_failure, promised, verdict_note
from harness.config.crash import FsSpec
from harness.errors import GuestError, GuestMessageError, GuestPanic, GuestTimeout, HarnessError
from harness.model import contract, recovery
from harness.outcome import Outcome, reduce
from harness.record import guestmsg, guestserve
from harness.record import recorder as record
from harness.vm.backend import Disk, Guest, GuestSpec, start_guest

log = logging.getLogger("crashlab.guestcheck")
ORACLES = f"{record.GUEST_DIR}/oracles"


@dataclass(frozen=True)
class Item:
    key: str  # the crash state id
    image: Path  # a disposable copy of its crash image
    mark: str | None  # the last mark at or before the state
    exact: bool = False  # cut exactly at that mark: nothing after it is in the image
    oracle: str = ""  # the key of its oracle in check_batch's ``oracles``
    image2: Path | None = None  # fs.devices = 2: a copy of its log device's image


T = TypeVar("T")
R = TypeVar("R")


def in_guests(
    items: Sequence[T],
    start: Callable[[Sequence[T]], AbstractContextManager[Guest]],
    check_one: Callable[[Guest, int, T], R],
    failed: Callable[[T, Outcome, str], R],
) -> Iterator[tuple[T, R]]:
    """Check ``items`` one after another in guests started by ``start(remaining)``;
    yield each result the moment it is known.

    A hang or a panic is the lab's ``timeout``/``panic`` for that item only: the guest is
    replaced and the rest go on. A guest that cannot be started or driven makes every
    item *not yet judged* a harness error -- an item already yielded keeps its result,
    so a channel failure never erases a finding.
    """
    todo = list(items)
    while todo:
        judged = 0
        try:
            with start(todo) as guest:
                for i, it in enumerate(todo):
                    try:
                        result = check_one(guest, i, it)
                    except (GuestTimeout, GuestPanic) as e:
                        kind = Outcome.TIMEOUT if isinstance(e, GuestTimeout) else Outcome.PANIC
                        judged = i + 1
                        yield it, failed(it, kind, f"{e.message}\n{e.console[-1200:]}")
                        break
                    judged = i + 1
                    yield it, result
        except HarnessError as e:
            if judged == 0 or not isinstance(e, GuestError):
                # Not a guest that died after its state was reported: the lab could not
                # drive a guest, so what is left is a harness error, never a finding.
                text = e.excerpt(1500)
                for it in todo[judged:]:
                    yield it, failed(it, Outcome.HARNESS_ERROR, text)
                return
        todo = todo[judged:]


def check_batch(
    items: Sequence[Item],
    fs: FsSpec,
    oracles: Mapping[str, dict[str, Any]],
    *,
    timeout: float,
    cpus: int = GuestSpec.cpus,
    modes: Sequence[str] = (),
) -> Iterator[tuple[str, list[CheckResult]]]:
    """Yield (state id, guest checks) for each item, as soon as each is known; an item
    is verified against ``oracles[item.oracle]``, or only mounted and checked when its
    key has no oracle. ``cpus``: the guest's vCPUs (``guestpool.vcpus``); ``modes``: the
    recovery modes beside the read-write mount (model/recovery.py), one check each."""

    @contextlib.contextmanager
    def start(todo: Sequence[Item]) -> Iterator[Guest]:
        disks = tuple(Disk(it.image, f"s{i}") for i, it in enumerate(todo))
        disks += tuple(Disk(it.image2, f"l{i}") for i, it in enumerate(todo) if it.image2)
        spec = GuestSpec(disks=disks, command_timeout=timeout, cpus=cpus)
        with start_guest(spec) as guest:
            _prepare(guest, {it.oracle: oracles[it.oracle] for it in todo if it.oracle in oracles})
            yield guest

    def one(guest: Guest, i: int, it: Item) -> list[CheckResult]:
        dev2 = guest.disk(f"l{i}") if it.image2 else ""
        return _check_one(guest, f"s{i}", it, fs, it.oracle in oracles, timeout, modes, dev2)

    def failed(it: Item, kind: Outcome, text: str) -> list[CheckResult]:
        return [CheckResult("guest", "mount+verify", kind, None, 0.0, text)]

    for it, result in in_guests(items, start, one, failed):
        yield it.key, result


def oracle_path(key: str) -> str:
    return f"{ORACLES}/{key or 'oracle'}.json"


SERVER = f"{record.GUEST_DIR}/checker"


def _prepare(guest: Guest, oracles: Mapping[str, dict[str, Any]]) -> None:
    record.install_scripts(guest)
    guest.run(["mkdir", "-p", ORACLES], check=True)
    for key, oracle in oracles.items():
        guest.write_file(oracle_path(key), json.dumps(oracle).encode())
    # One checker for the guest's life (checkstate.py ``serve``), asked once a state.
    guestserve.start(guest, SERVER, "checkstate.py", ["--serve"])


def _check_one(
    guest: Guest,
    serial: str,
    it: Item,
    fs: FsSpec,
    verify: bool,
    timeout: float,
    modes: Sequence[str] = (),
    dev2: str = "",
) -> list[CheckResult]:
    request = contract.CheckRequest(
        dev=guest.disk(serial),
        fs=str(fs.type),
        mount_opts=",".join(fs.all_mount_options(dev2)),
        timeout=timeout,
        oracle=oracle_path(it.oracle) if verify else "",
        mark=(it.mark or "") if verify else "",
        exact=it.exact and verify,
        modes=[m for m in modes if m != recovery.RW],
        dev2=dev2,
        fsck_flags=fs.second_flags(dev2),
    )
    # Each mode is a mount and an umount more, each bounded by the timeout.
    r = guestserve.ask(guest, SERVER, request.to_json(), timeout * (4 + 2 * len(modes)) + 30)
    if not r.ok:
        return _lab((r.err or r.out)[-1500:], r.seconds, r.exitcode, "checkstate.py failed")
    try:
        facts = guestmsg.read(contract.CheckFacts, "checkstate.py", r.out)
    except GuestMessageError as e:  # the lab's, for this state only: never a finding
        return _lab(e.excerpt(1500), r.seconds)
    if facts.serve_error:  # the checker's own failure: the lab's, never a finding
        return _lab(facts.serve_error[-1500:], r.seconds)
    return [judge(facts), *judge_modes(facts)]


def _lab(text: str, seconds: float, rc: int | None = None, note: str = "") -> list[CheckResult]:
    """The one check of a state the lab failed to ask about: a harness error."""
    return [
        CheckResult("guest", "mount+verify", Outcome.HARNESS_ERROR, rc, seconds, text, note=note)
    ]


def judge(facts: contract.CheckFacts) -> CheckResult:
    """Facts from checkstate.py -> one guest CheckResult. Failure is the default: only a
    clean mount, a passing oracle, a clean umount and a clean fsck make a state
    consistent. What the lab itself could not do (a missing fs driver, a verifier bug,
    an umount that failed) is a harness outcome -- unless the state had already shown a
    finding, which it keeps. A disk the host failed under the check voids it all."""
    if failed := facts.disk_errors:
        # The mount, the oracle and fsck read what the host's file failed to give or
        # keep: no verdict of this state stands, not even a finding (exit 3, redone).
        text = "the guest's disk failed a request (the host's file, not the filesystem):"
        return CheckResult(
            "guest", "mount+verify", Outcome.HARNESS_ERROR, None, 0.0,
            "\n".join([text, *failed])[-1500:], note="host disk error",
        )  # fmt: skip
    phases: dict[str, float] = {}
    out = []
    before = facts.before_mount
    if before is not None:  # the log replay a JFS volume needs before it mounts
        phases["log_replay"] = before.seconds
        out.append(f"before mount: {shlex.join(before.argv)} (exit {before.rc})")
        out.append(before.output)
    mount = facts.mount
    if mount is None:  # only a request the checker failed has none (serve_error)
        return CheckResult("guest", "mount", Outcome.HARNESS_ERROR, None, 0.0, "no mount")
    phases["mount"] = mount.seconds
    out.append(mount.output)
    if mount.rc != 0:
        outcome = mount_failure(mount)
        return CheckResult(
            "guest", "mount", outcome, mount.rc, mount.seconds, _output(out, facts), phases
        )
    outcomes: list[Outcome] = []
    note = ""
    verify = facts.verify
    if verify is not None and not verify.ok:
        outcomes.append(Outcome.DATA_LOSS)
        note = verdict_note(verify)
        out.insert(0, "oracle: " + note)
    classes = facts.classes
    broken = [c["target"] for c in classes if c.get("violated")]
    if broken:
        # A database that broke what its journal mode and synchronous level promise.
        outcomes.append(Outcome.DATA_LOSS)
        note = (note + " " + json.dumps({"promise_broken": broken})).strip()[:1500]
        out.insert(0, "pattern: promise broken by " + ", ".join(broken))
    if facts.verify_error:
        outcomes.append(Outcome.HARNESS_ERROR)
        out.append("verifier failed (a lab bug, not a finding):\n" + facts.verify_error)
    if (umount := facts.umount) is not None:
        phases["umount"] = umount.seconds
        if umount.rc != 0:
            out.append(f"umount failed ({umount.rc}): {umount.output}")
            outcomes.append(Outcome.HARNESS_ERROR)
    fsck = facts.fsck
    if fsck is not None:
        phases["fsck_after"] = fsck.seconds
        out.append(fsck.output)
        if fsck.rc == 0:
            outcomes.append(Outcome.CONSISTENT)
        else:
            again = facts.fsck_after_repair
            phases["repair"] = facts.repair.seconds if facts.repair else 0.0
            repaired = again is not None and again.rc == 0
            outcomes.append(Outcome.REPAIRED if repaired else Outcome.UNREPAIRABLE)
    if verify is not None and verify.blocks is not None:
        # The fio oracle's block classes (rule 12), found or not: kept last, so the tail
        # the store keeps always says what the state held.
        out.append("fio blocks: " + json.dumps(verify.blocks, separators=(",", ":")))
    judged = CheckResult(
        "guest", "mount+verify", reduce(outcomes), fsck.rc if fsck is not None else None,
        sum(phases.values()), _output(out, facts), phases, note=note, classes=classes,
    )  # fmt: skip
    return promised(judged, verify)


def _output(parts: list[str], facts: contract.CheckFacts) -> str:
    """The check's output, its tail kept, with the mount's kernel messages last and
    whole (what ``results table journal`` reads)."""
    kernel = "".join(f"\nkernel: {line}" for line in facts.kmsg)[-700:]
    return "\n".join(o for o in parts if o)[-(1500 - len(kernel)) :] + kernel
