"""The end-of-run summary body of the recovery kind: recovery time per cell and size,
and the seeds' claims beside what this run measured."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from harness.experiments import lifecycle
from harness.report.markup import esc
from harness.report.recovery_fit import PHASE_WORDS, PHASES, claims, fits
from harness.store.db import Store


def print_body(console: Console, r: lifecycle.Report) -> None:
    with Store.open(r.db, create=False) as st:
        obs = st.observations(r.run_id)
    t = Table("cell", "size", "files", "inodes used", "log replay s", "mount s", "fsck s",
              "e2fsck -fy s", "item s", "verdict")  # fmt: skip
    for o in obs:
        m = o["metrics"]
        ph = m.get("phases", {})
        pop = m.get("population", {})
        verdict = o["outcome"] + (" (no journal: expected)" if m.get("expected") else "")
        t.add_row(
            esc(o["cell"]["cell"]),
            f"{o['cell']['size']:g}G",
            str(pop.get("files", "-")),
            str(pop.get("inodes_used", "-")),
            *(f"{ph[p]:.3f}" if p in ph else "-" for p in PHASES),
            f"{m.get('item_seconds', 0):.0f}",
            esc(verdict),
        )
    console.print(t)
    f = fits(obs)
    if f:
        ft = Table("cell", "phase", "n", "s / GiB", "R²", "s / M inodes", "R²")
        for row in f:
            ft.add_row(
                esc(row["cell"]),
                PHASE_WORDS[row["phase"]],
                str(row["n"]),
                f"{row['s_per_gib']:.4f}",
                f"{row['r2_size']:.3f}",
                f"{row['s_per_minodes']:.4f}" if "s_per_minodes" in row else "-",
                f"{row['r2_inodes']:.3f}" if "r2_inodes" in row else "-",
            )
        console.print(ft)
    for c in claims(obs):
        console.print(f"measured: {c}", markup=False)
