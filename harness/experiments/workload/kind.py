"""I/O profiles (``kind = "workload"``): an fio job per filesystem cell under blktrace,
its throughput, latency and what reached the disk."""

from harness.experiments.registry import Kind, Variant
from harness.experiments.workload import settings
from harness.experiments.workload.experiment import Workload
from harness.experiments.workload.summary import print_run_body
from harness.report import dashboard, io

KIND = Kind(
    name="workload",
    settings=settings.WorkloadScenario,
    run_kind="workload",
    experiments={"workload": Variant(Workload, print_run_body)},
    settable=settings.SETTABLE,
    tables=(io.TABLE,),
    plots=(io.PLOT,),
    panels=(dashboard.IO_PER_CELL,),
)
