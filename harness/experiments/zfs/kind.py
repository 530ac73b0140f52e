"""ZFS (``kind = "zfs"``, seeds 000, 001 and 003): scrub and resilver timed against fill
and layout (zfs-scan), and pool crash states imported in a guest (zfs-crash)."""

from harness.experiments.registry import Kind, Variant
from harness.experiments.zfs import settings
from harness.experiments.zfs.crash import ZfsCrash
from harness.experiments.zfs.scan import ZfsScan
from harness.experiments.zfs.summary import print_crash_body, print_scan_body
from harness.report import dashboard, plots, zfs

KIND = Kind(
    name="zfs",
    settings=settings.ZfsScenario,
    run_kind="zfs",
    experiments={
        "zfs-scan": Variant(ZfsScan, print_scan_body, (), ("zfs",)),
        "zfs-crash": Variant(ZfsCrash, print_crash_body, ("DM_LOG_WRITES",), ("zfs",)),
    },
    settable=settings.SETTABLE,
    aliases=settings.ALIASES,
    tables=zfs.TABLES,
    plots=(plots.RESILVER, plots.SCRUB, plots.PROGRESS),
    panels=(dashboard.RESILVER_VS_FILL,),
)
