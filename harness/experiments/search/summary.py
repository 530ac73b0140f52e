"""The end-of-run summary body of a search: workloads by status, verdicts, and the
findings' clusters (``scenario results bugs RUN`` lists them in full)."""

from __future__ import annotations

from rich.console import Console

from harness.experiments import lifecycle
from harness.experiments.search.experiment import Search
from harness.report import render
from harness.report import search as report
from harness.store.db import Store


def print_body(console: Console, r: lifecycle.Report) -> None:
    assert isinstance(r.experiment, Search)
    s = r.summary  # the store is closed by now: what the run stored of itself
    status = ", ".join(f"{n} {k}" for k, n in sorted(s["workload_status"].items()))
    console.print(f"workloads: {s['workloads']} ({status}); {r.items} crash states", markup=False)
    if "reuse" in s:
        console.print(f"states: {render.reuse_line(s['reuse'])}", markup=False)
    secs = s["recording_seconds"]
    if secs:
        per = secs.get("record", 0.0) / max(1, s["recorded_now"])
        console.print(
            f"recording: {secs.get('boot', 0):.1f} s booting, {per:.2f} s per workload",
            markup=False,
        )
    if (gone := s.get("logs_dropped")) is not None:
        console.print(
            f"logs let go: {gone['workloads']} workloads' ({gone['freed_bytes'] / 1e6:.1f} MB), "
            "none of their states a finding (keep_logs = 'findings')",
            markup=False,
        )
    with Store.open(r.db, create=False) as st:
        clusters = report.clusters(st, r.run_id)
    report.print_clusters(console, clusters, limit=10)
