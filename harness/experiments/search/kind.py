"""Search (``kind = "search"``): a generated space of workloads (ACE's bounded grammar),
each recorded on dm-log-writes, every crash state checked, findings clustered."""

from harness.experiments.registry import Kind, Variant
from harness.experiments.search import settings
from harness.experiments.search.experiment import Search
from harness.experiments.search.summary import print_body
from harness.report import search as report

KIND = Kind(
    name="search",
    settings=settings.SearchScenario,
    run_kind="search",
    experiments={"search": Variant(Search, print_body, ("DM_LOG_WRITES",))},
    settable=settings.SETTABLE,
    tables=(report.TABLE,),
)
