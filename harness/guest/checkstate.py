#!/usr/bin/env python3
"""Check one crash image inside the guest (stdlib only; copied in by the host).

mount (the kernel's own journal/log replay, timed) -> verify the oracle for the state's
last mark -> umount (timed) -> the filesystem's checker, read-only (timed) -> if it found
damage, its repair mode, then the read-only check again. Prints one JSON object of raw
facts; the host turns them into an outcome, so this script never judges.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fioverify  # type: ignore[import-not-found]
import oracle  # type: ignore[import-not-found]
import runner  # type: ignore[import-not-found]


def run(argv: list[str], timeout: float) -> dict[str, Any]:
    """A command's record as the host's checks read it (``output``: its last 2000
    characters; a timeout shows as rc -1 and ``[timed out]``)."""
    record: dict[str, Any] = runner.run(argv, timeout).record(2000, key="output")
    return record


# Kernel messages of a mount worth keeping: journal recovery and its refusals.
KMSG_WORDS = ("JBD2", "jbd2", "EXT4-fs", "XFS", "BTRFS", "recovery")


def fsck_argv(fs: str, dev: str, repair: bool) -> list[str]:
    """The filesystem's read-only check (or its repair) of ``dev``, from the table the
    host installs beside this program (harness/filesystems.py)."""
    return [*runner.filesystem(fs)["repair" if repair else "check"], dev]


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


def check(argv: list[str]) -> dict[str, Any]:
    """The facts of one state, checked as ``argv`` (``parser()``'s options) says, and
    whether the guest's disk failed under them (``disk_errors``: then they are void)."""
    a = parser().parse_args(argv)
    facts = _check(a)
    said = runner.run(["dmesg"], a.timeout).stdout.splitlines()
    if failed := runner.disk_errors(said):
        facts["disk_errors"] = failed
    return facts


def _check(a: argparse.Namespace) -> dict[str, Any]:
    os.makedirs(a.mountpoint, exist_ok=True)
    dev = os.path.realpath(a.dev)
    facts: dict[str, Any] = {"dev": dev}
    opts = ["-o", a.mount_opts] if a.mount_opts else []
    runner.run(["dmesg", "--clear"], a.timeout)  # this mount's messages only
    replayed = runner.before_mount(a.fs, dev, a.timeout)
    if replayed is not None:
        facts["before_mount"] = replayed
    facts["mount"] = m = run(["mount", "-t", a.fs, *opts, dev, a.mountpoint], a.timeout)
    said = runner.run(["dmesg"], a.timeout).stdout.splitlines()
    # What the journal's recovery did (replayed, refused a transaction): its own words.
    facts["kmsg"] = [line for line in said if any(w in line for w in KMSG_WORDS)][-12:]
    if m["rc"] == 0:
        if a.oracle:
            try:
                data = oracle.load_oracle(a.oracle)
                # A fio workload's oracle is its blocks' (rule 12), the op generator's its files'.
                judge = fioverify.verify if data.get("fio") else oracle.verify
                facts["verify"] = judge(a.mountpoint, data, a.mark or None, exact=a.exact)
                if data.get("pattern"):
                    # An application pattern: what the state left of each target file.
                    # Imported only here: its imports cost a second per state under TCG.
                    import apppat  # type: ignore[import-not-found]

                    facts["classes"] = apppat.classify(a.mountpoint, data, a.mark or None, a.exact)
            except OSError as e:  # the filesystem would not let us read the tree: a finding
                facts["verify"] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            except Exception:  # a bug of ours or a bad oracle: never a finding
                facts["verify_error"] = traceback.format_exc()[-2000:]
        facts["umount"] = u = run(["umount", a.mountpoint], a.timeout)
        if u["rc"] != 0:
            # Still mounted: a checker on it would judge a live filesystem. Stop here.
            return facts
    facts["fsck"] = f = run(fsck_argv(a.fs, dev, repair=False), a.timeout)
    if f["rc"] != 0:
        facts["repair"] = run(fsck_argv(a.fs, dev, repair=True), a.timeout)
        facts["fsck_after_repair"] = run(fsck_argv(a.fs, dev, repair=False), a.timeout)
    return facts


def serve(folder: str) -> None:
    """Check states one after another for as long as the guest lives: read one request
    (a JSON argv) from the FIFO ``folder/req``, write its facts to ``folder/resp``.

    Starting Python and importing this module costs a second and a half per state under
    TCG -- twice the check itself -- so a check guest starts it once. A request that
    raises gets ``{"serve_error": traceback}``, which the host counts as its own
    failure, never a finding.
    """
    while True:
        with open(os.path.join(folder, "req")) as f:
            line = f.readline()
        if not line:
            continue
        try:
            facts: dict[str, Any] = check(json.loads(line))
        except BaseException:  # reported to the host, and the loop goes on
            facts = {"serve_error": traceback.format_exc()[-2000:]}
        with open(os.path.join(folder, "resp"), "w") as f:
            json.dump(facts, f)


def main() -> int:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
        return 0
    json.dump(check(sys.argv[1:]), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
