#!/usr/bin/env python3
"""Check one crash image inside the guest (stdlib only; copied in by the host).

mount (the kernel's own journal/log replay, timed) -> verify the oracle for the state's
last mark -> umount (timed) -> the filesystem's checker, read-only (timed) -> if it found
damage, its repair mode, then the read-only check again. Prints one JSON object of raw
facts; the host turns them into an outcome, so this script never judges.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..model import contract, fioverify, kernlog, oracle, recovery
from . import fifoserve, recover, runner


def run(argv: list[str], timeout: float) -> contract.Command:
    """A command's record as the host's checks read it (a timeout shows as rc -1 and
    ``[timed out]``)."""
    record: contract.Command = runner.run(argv, timeout).record()
    return record


# Kernel messages of a mount worth keeping: journal recovery and its refusals.
KMSG_WORDS = ("JBD2", "jbd2", "EXT4-fs", "XFS", "BTRFS", "F2FS-fs", "recovery", "recover_")


def fsck_argv(fs: str, dev: str, repair: bool, flags: Sequence[str] = ()) -> list[str]:
    """The filesystem's read-only check (or its repair) of ``dev``, from the table the
    host installs beside this program (harness/filesystems.py); ``flags`` name its log
    device."""
    return [*runner.filesystem(fs)["repair" if repair else "check"], *flags, dev]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", required=True)
    ap.add_argument("--fs", required=True)
    ap.add_argument("--mount-opts", default="")
    ap.add_argument("--mountpoint", default="/mnt/check")
    ap.add_argument("--oracle", default="")
    ap.add_argument("--mark", default="")
    ap.add_argument(
        "--exact", action="store_true", help="the state is cut exactly at --mark (nothing after)"
    )
    ap.add_argument("--timeout", type=float, default=300)
    return ap


def request(argv: list[str]) -> contract.CheckRequest:
    """The request ``argv`` (``parser()``'s options) makes."""
    return contract.CheckRequest(**vars(parser().parse_args(argv)))


def check(r: contract.CheckRequest) -> contract.CheckFacts:
    """The facts of one state, checked as ``r`` says, and whether the guest's disk
    failed under them (``disk_errors``: then they are void)."""
    kmsg = runner.Kmsg()  # this state's messages only
    try:
        facts = _check(r, kmsg)
        return replace(facts, disk_errors=kernlog.disk_errors(kmsg.read()))
    finally:
        kmsg.close()


def _check(a: contract.CheckRequest, kmsg: runner.Kmsg) -> contract.CheckFacts:
    os.makedirs(a.mountpoint, exist_ok=True)
    dev = os.path.realpath(a.dev)
    # Other recovery modes first, each on an overlay: the state stays as the crash left it.
    modes = [recover.before(a, mode, verdict) for mode in a.modes if recovery.on_overlay(mode)]
    kmsg.read()  # their messages are theirs: the words kept below are the rw mount's
    opts = ["-o", a.mount_opts] if a.mount_opts else []
    replayed = runner.before_mount(a.fs, dev, a.timeout)
    m = run(["mount", "-t", a.fs, *opts, dev, a.mountpoint], a.timeout)
    said = kmsg.read()
    # What the journal's recovery did (replayed, refused a transaction): its own words.
    words = [line for line in said if any(w in line for w in KMSG_WORDS)][-12:]
    facts = contract.CheckFacts(dev=dev, before_mount=replayed, mount=m, kmsg=words)
    if m.rc == 0:
        if a.oracle:
            facts = _verify(a, facts)
        first = recover.tree(a.mountpoint) if recovery.REMOUNT in a.modes else None
        facts = replace(facts, umount=(u := run(["umount", a.mountpoint], a.timeout)))
        if u.rc != 0:
            # Still mounted: a checker on it would judge a live filesystem. Stop here.
            return replace(facts, modes=modes)
        if first is not None:
            modes.append(recover.again(a, first, verdict))
    fl = a.fsck_flags
    facts = replace(facts, fsck=(f := run(fsck_argv(a.fs, dev, False, fl), a.timeout)))
    if f.rc != 0:
        facts = replace(
            facts,
            repair=run(fsck_argv(a.fs, dev, True, fl), a.timeout),
            fsck_after_repair=run(fsck_argv(a.fs, dev, False, fl), a.timeout),
        )
    return replace(facts, modes=modes)


def verdict(a: contract.CheckRequest) -> contract.Verdict | None:
    """The oracle's verdict of the tree mounted at ``a.mountpoint`` (None: no oracle).
    OSError reading it is the filesystem's: an unreadable tree is a finding."""
    return _judged(a, oracle.load_oracle(a.oracle)) if a.oracle else None


def _judged(a: contract.CheckRequest, data: dict[str, Any]) -> contract.Verdict:
    # A fio workload's oracle is its blocks' (rule 12), the op generator's its files'.
    judge = fioverify.verify if data.get("fio") else oracle.verify
    try:
        return judge(a.mountpoint, data, a.mark or None, exact=a.exact)
    except OSError as e:  # the filesystem would not let us read the tree: a finding
        return _unreadable(a, e)


def _unreadable(a: contract.CheckRequest, e: OSError) -> contract.Verdict:
    return contract.Verdict(
        mark=None, exact=a.exact, known=False, checked=0, ok=False,
        error=f"{type(e).__name__}: {e}",
    )  # fmt: skip


def _verify(a: contract.CheckRequest, facts: contract.CheckFacts) -> contract.CheckFacts:
    """The mounted state verified against the oracle."""
    try:
        data = oracle.load_oracle(a.oracle)  # once a state: verdict() is the modes' path
        facts = replace(facts, verify=_judged(a, data))
        if data.get("pattern"):
            # An application pattern: what the state left of each target file.
            # Imported only here: its imports cost a second per state under TCG.
            from . import apppat

            classes = apppat.classify(a.mountpoint, data, a.mark or None, a.exact)
            facts = replace(facts, classes=classes)
    except OSError as e:  # the pattern's read of the tree: the filesystem's, a finding
        facts = replace(facts, verify=_unreadable(a, e))
    except Exception:  # a bug of ours or a bad oracle: never a finding
        facts = replace(facts, verify_error=contract.excerpt(traceback.format_exc()))
    return facts


def serve(folder: str) -> None:
    """Check states one after another for as long as the guest lives (fifoserve.py):
    each request a ``CheckRequest``, each reply its facts.

    Starting Python and importing this module costs a second and a half per state under
    TCG -- twice the check itself -- so a check guest starts it once. A request that
    raises (one the contract cannot read too) gets facts with only ``serve_error``, the
    traceback, which the host counts as its own failure, never a finding.
    """

    def handle(line: str) -> str:
        return check(contract.CheckRequest.from_json(line)).to_json()

    def failed(text: str) -> str:
        return contract.CheckFacts(serve_error=contract.excerpt(text)).to_json()

    fifoserve.serve(folder, handle, failed)


def main() -> int:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
        return 0
    sys.stdout.write(check(request(sys.argv[1:])).to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
