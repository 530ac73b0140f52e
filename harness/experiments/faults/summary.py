"""The end-of-run summary bodies of the fault kinds: fsync-eio, dust-scrub and
flakey-drop-remount."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from harness.experiments import lifecycle
from harness.experiments.faults.dropremount import DropRemount
from harness.experiments.faults.experiment import FSYNC_STEPS, FsyncEio
from harness.report.markup import cells, esc
from harness.store.db import Store


def eio_body(console: Console, r: lifecycle.Report) -> None:
    exp = r.experiment
    assert isinstance(exp, FsyncEio)
    with Store.open(r.db, create=False) as st:
        obs = st.observations(r.run_id)
    cols = ["filesystem", *FSYNC_STEPS, "new-file-fsync", "while faulty"]
    cols += ["fsync-after-restore", "after remount", "kernel", "verdict"]
    t = Table(*cols)
    for o in obs:
        row = o["metrics"].get("row", {})
        t.add_row(*cells(o["item"], *(row.get(c, "-") for c in cols[1:-1]), o["outcome"]))
    f = r.scenario.fault
    flap = f", flapping: up {f.up} s, down {f.down} s (fsync-2 after it came back)" if f.up else ""
    console.print(f"fault: {f.mode} after the first fsync{flap}")
    console.print(t)


def dust_body(console: Console, r: lifecycle.Report) -> None:
    with Store.open(r.db, create=False) as st:
        obs = st.observations(r.run_id)
    t = Table("filesystem", "measured", "verdict")
    for o in obs:
        row = o["metrics"].get("row", {})
        t.add_row(*cells(o["item"], ", ".join(f"{k} {v}" for k, v in row.items()), o["outcome"]))
    console.print(f"{r.scenario.bad_blocks} bad 4 KiB blocks (dm-dust) under the data")
    console.print(t)


def drop_body(console: Console, r: lifecycle.Report) -> None:
    exp = r.experiment
    assert isinstance(exp, DropRemount)
    with Store.open(r.db, create=False) as st:
        obs = st.observations(r.run_id)
    s = r.summary
    t = Table("filesystem @ sync point", "drop + remount", "crash replay", "agree", "verdict")
    for o in obs:
        m = o["metrics"]
        replay = (m.get("replay") or {}).get("outcome", "-")
        same = {True: "yes", False: "[red]NO[/]", None: "-"}[m.get("agree")]
        t.add_row(*cells(o["item"], m["drop"]["outcome"], replay), same, esc(o["outcome"]))
    console.print(
        f"fault: {r.scenario.fault.mode} from the return of sync points {s['drop_points']}"
    )
    console.print(t)
    if not s["cross_checked"]:  # cross_check = false (a measurement, not a crash model)
        return
    console.print(
        f"the two crash models agree on {s['agree']} of {s['cross_checked']} points"
        + (
            f"; [red]lab inconsistencies[/]: {esc(', '.join(s['lab_inconsistencies']))}"
            if s["lab_inconsistencies"]
            else ""
        )
    )
