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

import apppat  # type: ignore[import-not-found]
import oracle  # type: ignore[import-not-found]
import runner  # type: ignore[import-not-found]


def run(argv: list[str], timeout: float) -> dict[str, Any]:
    """A command's record as the host's checks read it (``output``: its last 2000
    characters; a timeout shows as rc -1 and ``[timed out]``)."""
    record: dict[str, Any] = runner.run(argv, timeout).record(2000, key="output")
    return record


def fsck_argv(fs: str, dev: str, repair: bool) -> list[str]:
    if fs.startswith("ext"):
        return ["e2fsck", "-f", "-y" if repair else "-n", dev]
    if fs == "xfs":
        return ["xfs_repair", dev] if repair else ["xfs_repair", "-n", dev]
    if fs == "btrfs":
        return (
            ["btrfs", "check", "--repair", "--force", dev]
            if repair
            else ["btrfs", "check", "--readonly", dev]
        )
    raise SystemExit(f"checkstate: unknown fs {fs}")


def main() -> int:
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
    a = ap.parse_args()
    os.makedirs(a.mountpoint, exist_ok=True)
    dev = os.path.realpath(a.dev)
    facts: dict[str, Any] = {"dev": dev}
    opts = ["-o", a.mount_opts] if a.mount_opts else []
    facts["mount"] = m = run(["mount", "-t", a.fs, *opts, dev, a.mountpoint], a.timeout)
    if m["rc"] == 0:
        if a.oracle:
            try:
                data = oracle.load_oracle(a.oracle)
                facts["verify"] = oracle.verify(a.mountpoint, data, a.mark or None, exact=a.exact)
                if data.get("pattern"):
                    # An application pattern: what the state left of each target file.
                    facts["classes"] = apppat.classify(a.mountpoint, data, a.mark or None, a.exact)
            except OSError as e:  # the filesystem would not let us read the tree: a finding
                facts["verify"] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            except Exception:  # a bug of ours or a bad oracle: never a finding
                facts["verify_error"] = traceback.format_exc()[-2000:]
        facts["umount"] = u = run(["umount", a.mountpoint], a.timeout)
        if u["rc"] != 0:
            # Still mounted: a checker on it would judge a live filesystem. Stop here.
            json.dump(facts, sys.stdout)
            return 0
    facts["fsck"] = f = run(fsck_argv(a.fs, dev, repair=False), a.timeout)
    if f["rc"] != 0:
        facts["repair"] = run(fsck_argv(a.fs, dev, repair=True), a.timeout)
        facts["fsck_after_repair"] = run(fsck_argv(a.fs, dev, repair=False), a.timeout)
    json.dump(facts, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
