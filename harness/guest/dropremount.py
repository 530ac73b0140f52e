#!/usr/bin/env python3
"""fstests' drop-and-remount crash model, inside the guest (stdlib only).

For each sync point K it is given: the disk under test sits on dm-flakey, loaded
healthy; make the filesystem, mount it, run the seeded op workload (``opgen.py``, the
same ops and oracle as a crash-replay recording with that seed) and, the moment the
workload's K-th sync call has returned, reload the device with the fault
(``drop_writes``: every later write is acknowledged and thrown away -- what a disk that
lost power would have kept, minus its volatile cache). The workload goes on to the end,
the filesystem is unmounted (its last writes dropped too), the healthy table is loaded
back and ``checkstate.py`` mounts it (the kernel's own recovery), verifies the oracle
as a state cut exactly at mark K, unmounts and runs the checker. This is fstests'
``_flakey_drop_and_remount``.

Prints a ``contract.DropResult``: the raw facts of each sync point; the host judges.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..model import contract, generate
from ..model.oracle import MARK_PREFIX
from . import opgen, runner

DM = "crashlab-drop"
MNT = "/mnt/drop"
# The folder the package was unpacked in, beside the programs' launchers (guestfiles.py).
LAUNCHERS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Failed(Exception):
    """A setup step failed: the lab's problem, reported as such."""


def one(a: argparse.Namespace, at: int) -> contract.DropPoint:
    steps: list[contract.Step] = []
    dev = f"/dev/mapper/{DM}"

    def step(name: str, argv: list[str]) -> None:
        rec = runner.run(argv, a.timeout).record()
        steps.append(rec.as_step(name))
        if rec.rc != 0:
            raise Failed(name)

    def reload(name: str, table: str) -> None:
        # --nolockfs: a freeze would flush exactly what the fault is about to drop.
        step(f"{name}-suspend", ["dmsetup", "suspend", "--nolockfs", DM])
        step(f"{name}-load", ["dmsetup", "load", DM, "--table", table])
        step(f"{name}-resume", ["dmsetup", "resume", DM])

    target = f"{MARK_PREFIX}{at}"
    switched: dict[str, Any] = {}

    def on_mark(text: str) -> None:
        if text == target:
            reload("fault-on", a.faulty)
            switched["after_op"] = text

    w = json.loads(a.workload)
    args = argparse.Namespace(
        seed=w["seed"],
        ops=w["ops"],
        files=w["files"],
        max_size=w["max_size"],
        fsync_names="yes" if w["fsync_names"] else "no",
    )
    oracle_path = f"/tmp/drop-{at}.json"
    workload: contract.WorkloadEnd | None = None
    check: contract.CheckFacts | None = None
    failed = ""
    try:
        step("dm-create", ["dmsetup", "create", DM, "--table", a.healthy])
        try:
            step("mkfs", [*json.loads(a.mkfs), dev])
            os.makedirs(MNT, exist_ok=True)
            opts = ["-o", a.mount_opts] if a.mount_opts else []
            step("mount", ["mount", "-t", a.fs, *opts, dev, MNT])
            body = opgen.execute(
                MNT,
                generator=generate.Generator(args.seed, args.files, args.max_size),
                count=args.ops,
                fsync_names=w["fsync_names"],
                noop_sync=w["noop_sync"],
                on_mark=on_mark,
            )
            workload = contract.WorkloadEnd(
                complete=body["complete"], error=body["error"], final_mark=body["final_mark"]
            )
            opgen.write_json(oracle_path, opgen.oracle_doc(args, body))
            step("umount", ["umount", MNT])
            reload("fault-off", a.healthy)
            verify = [
                "python3", f"{LAUNCHERS}/checkstate.py", "--dev", dev, "--fs", a.fs,
                "--mount-opts", a.mount_opts, "--mountpoint", MNT + "-check",
                "--oracle", oracle_path, "--mark", target, "--exact",
                "--timeout", str(a.timeout),
            ]  # fmt: skip
            # its JSON report is read whole: it can run past the tail kept for the record
            ran = runner.run(verify, a.timeout * 5 + 30)
            if ran.rc != 0:
                steps.append(ran.record().as_step("checkstate"))
                raise Failed("checkstate")
            check = contract.CheckFacts.from_json(ran.stdout)
        finally:
            runner.run(["umount", MNT])
            runner.run(["dmsetup", "remove", DM])
    except Failed as e:
        failed = str(e)
    return contract.DropPoint(
        at=at, mark=target, steps=steps, workload=workload, switched=bool(switched),
        check=check, failed=failed,
    )  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fs", required=True)
    ap.add_argument("--mkfs", required=True, help="JSON argv of mkfs, without the device")
    ap.add_argument("--mount-opts", default="")
    ap.add_argument("--healthy", required=True, help="the dm-flakey table that never fails")
    ap.add_argument("--faulty", required=True, help="the table switched on at the sync point")
    ap.add_argument("--workload", required=True, help="JSON: seed, ops, files, max_size, ...")
    ap.add_argument("--at", required=True, help="sync points, comma-separated (1 = first)")
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    points = [one(a, int(k)) for k in a.at.split(",")]
    sys.stdout.write(contract.DropResult(points=points).to_json())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
