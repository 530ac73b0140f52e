"""Recovery time against size (``kind = "recovery"``, seeds 002 and 004): filesystems
populated to a size, crashed, and timed through journal replay and fsck."""

from harness.experiments.recovery import settings
from harness.experiments.recovery.experiment import Recovery
from harness.experiments.recovery.summary import print_body
from harness.experiments.registry import Kind, Variant
from harness.report import dashboard, recovery

KIND = Kind(
    name="recovery",
    settings=settings.RecoveryScenario,
    run_kind="recovery",
    experiments={"recovery": Variant(Recovery, print_body, ("DM_LOG_WRITES",))},
    settable=settings.SETTABLE,
    plots=(recovery.VS_SIZE,),
    panels=(dashboard.RECOVERY_VS_SIZE,),
)
