"""Device faults under a mounted filesystem (``kind = "faults"``): what fsync returns
when the disk fails (fsync-eio), what a scrub repairs over bad blocks (dust-scrub), and
crash by dropping writes then remounting, cross-checked against crash replay
(flakey-drop-remount)."""

from harness.experiments.faults import settings, summary
from harness.experiments.faults.dropremount import DropRemount
from harness.experiments.faults.experiment import DustScrub, FsyncEio
from harness.experiments.registry import Kind, Variant
from harness.report import faults as report

KIND = Kind(
    name="faults",
    settings=settings.FaultsScenario,
    run_kind="faults",
    experiments={
        "fsync-eio": Variant(FsyncEio, summary.eio_body, ("DM_FLAKEY",)),
        "dust-scrub": Variant(DustScrub, summary.dust_body, (), ("dm-dust",)),
        "flakey-drop-remount": Variant(
            DropRemount, summary.drop_body, ("DM_FLAKEY", "DM_LOG_WRITES")
        ),
    },
    settable=settings.SETTABLE,
    tables=(report.TABLE,),
)
