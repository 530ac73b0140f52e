"""Check-log (``kind = "check-log"``): a dm-log-writes log recorded elsewhere, cut into
crash states and checked on the host and in a guest, stored as a crash run."""

from harness.experiments.checklog import settings
from harness.experiments.checklog.experiment import CheckLog
from harness.experiments.checklog.summary import print_body
from harness.experiments.registry import Kind, Variant

KIND = Kind(
    name="check-log",
    settings=settings.LogCheckScenario,
    # Its states are crash states like any recorded log's: one table, one set of reports.
    run_kind="crash",
    experiments={"check-log": Variant(CheckLog, print_body)},
    settable=settings.SETTABLE,
)
