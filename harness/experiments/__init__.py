"""Experiment kinds on one run lifecycle (``lifecycle.py``); importing the package
registers every kind, so ``scenario run`` and campaigns find them by name."""

from harness.experiments import crash, dropremount, faults, recovery, workload
from harness.experiments.zfs import crash as zfs_crash
from harness.experiments.zfs import scan as zfs_scan

__all__ = ["crash", "dropremount", "faults", "recovery", "workload", "zfs_crash", "zfs_scan"]
