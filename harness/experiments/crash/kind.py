"""Crash replay (``kind = "crash"``, the default): a workload recorded on dm-log-writes,
its log cut into crash states, each checked on the host and in a guest."""

from harness.config import crash as settings
from harness.crashstate.summary import print_body
from harness.experiments.crash.experiment import CrashReplay
from harness.experiments.registry import Kind, Variant
from harness.report import dashboard, journal, patterns, plots, query

KIND = Kind(
    name="crash",
    settings=settings.Scenario,
    run_kind="crash",
    experiments={"crash": Variant(CrashReplay, print_body, ("DM_LOG_WRITES",))},
    settable=settings.SETTABLE,
    tables=(query.RECOVERY, journal.TABLE, patterns.TABLE),
    plots=(plots.RECOVERY, plots.CRASHMAP, patterns.PLOT),
    panels=(dashboard.PATTERN_CLASSES,),
)
