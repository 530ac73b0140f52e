"""Search scenarios (``kind = "search"``): many generated workloads, each recorded on a
fresh filesystem under its own dm-log-writes log, their crash states checked together
(``harness/experiments/search/experiment.py``).

The generator is ACE's bounded grammar (``harness/model/ace.py``): ``seq`` core ops, each
followed by a persistence op, over a small file set; seq-1 is enumerated whole, larger
spaces are sampled by seed (``sample``) or cut to their first workloads (``limit``).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from harness.config import settings
from harness.config.base import ScenarioBase
from harness.config.crash import (
    CheckSpec,
    CrashSpec,
    FsSpec,
    check_devices,
    check_method,
    check_ordered,
    check_recovery,
)
from harness.config.settings import Settings, problem
from harness.config.workloads import check_family, ordered_metadata_field
from harness.model import ace, acespace, families


def _default_crash() -> CrashSpec:
    # ACE checks at the persistence points (the marks, cut exactly); the FUA writes
    # between them are where a journal commit can be torn.
    return CrashSpec.model_validate(
        {"states": [{"kind": "mark"}, {"kind": "fua"}], "max_states": 12}
    )


class AceSpec(Settings):
    """Which workloads of ACE's space a run takes."""

    grammar: Literal["ace", "ace-x", "ace-n"] = Field(
        "ace",
        description="ACE's classes, or ace-x: and truncate to 0, symlink, chmod, "
        "RENAME_EXCHANGE / NOREPLACE, a directory moved into another, fsync through a "
        "descriptor held across unlink / rmdir, O_TMPFILE + linkat; or ace-n: ace-x and "
        "a file created, linked or renamed into the directory the workload made",
    )
    seq: int = Field(
        1, ge=1, le=4, description="core ops per workload (seq-4: by indices, sample or budget)"
    )
    sample: int = Field(0, ge=0, description="a seeded sample of this many (0: every one)")
    limit: int = Field(0, ge=0, description="only the first N of the selection (a CI slice)")
    op_classes: tuple[str, ...] = Field(
        (), description="only workloads whose core ops are all of these classes"
    )
    relog: bool = Field(
        False, description="the same as family = 'relog' (kept for older scenario files)"
    )
    family: str = Field(
        "",
        description="only the workloads of this op family (harness/model/families.py): "
        + "; ".join(f"{k}: {v}" for k, v in families.FAMILIES.items()),
    )
    budget: str = Field(
        "",
        description="a wall-clock budget ('8h', '90m', '45s', '1h30m'): record the selection "
        "in an order fixed by the seed until it is spent; running again goes on from there",
    )
    indices: tuple[int, ...] = Field(
        (),
        description="exactly these workloads of the space (as `results bugs` names them), "
        "e.g. one cluster's, or a hand-picked family; the filters above then apply to them",
    )
    noop_sync: bool = Field(
        False, description="a positive control: never really sync; expect findings"
    )
    # btrfs-new-name-skips-dentries (5630f7557de6) keeps every name the fsync-names
    # promise asks for; only this profile sees the new directory's file it loses.
    ordered_metadata: bool = ordered_metadata_field()
    # As for a crash run (config/workloads.py): the write-through model -- each mark then holds
    # every write completed before it, so a loss is the filesystem's, not the cache's.
    flush_after_sync: bool = Field(
        False, description="experiment: fsync the block device after every sync call"
    )

    @model_validator(mode="after")
    def _check(self) -> AceSpec:
        known = sorted({c.op_class for c in ace.cores(self.grammar)})
        bad = [c for c in self.op_classes if c not in known]
        if bad:
            raise problem(
                f"unknown op class {bad[0]!r}", "valid ones: " + ", ".join(known), key="op_classes"
            )
        self._check_family()
        if self.budget:
            budget_seconds(self.budget)  # raises the problem
            if self.sample or self.indices:
                raise problem(
                    "a budget takes the selection in a seeded order of its own",
                    "drop workload.sample and workload.indices, or the budget (workload.budget='')",
                    key="budget",
                )
        size = ace.space(self.seq, self.grammar)
        if self.seq >= 4 and not (self.indices or self.sample or self.budget):
            raise problem(  # walking billions of indices in order would never end
                f"seq-{self.seq} has {size:,} indices: too many to take whole",
                "give workload.indices, workload.sample or workload.budget",
                key="seq",
            )
        for i in self.indices:
            if not 0 <= i < size or not acespace.valid(ace.decode(self.seq, i, self.grammar)):
                raise problem(
                    f"workload {i} is not a valid seq-{self.seq} workload",
                    f"indices lie in 0..{size - 1} and name workloads whose ops can run "
                    f"(`python -m harness.guest.ace list --seq {self.seq}` lists them)",
                    key="indices",
                )
        if self.indices and self.sample > len(self.indices):
            raise problem(
                f"a sample of {self.sample} is larger than the {len(self.indices)} indices given",
                f"sample at most {len(self.indices)}, or 0 for every one of them",
                key="sample",
            )
        if self.sample > size:
            raise problem(
                f"a sample of {self.sample} is larger than seq-{self.seq}'s space of {size}",
                f"sample at most {size}, or 0 for every workload",
                key="sample",
            )
        return self

    def _check_family(self) -> None:
        if self.relog and self.family not in ("", "relog"):
            raise problem(
                f"relog = true is the family 'relog', not {self.family!r}",
                "drop workload.relog and keep workload.family",
                key="relog",
            )
        check_family(self.family)
        family = self.chosen_family()
        need = families.GRAMMARS_OF.get(family, ace.GRAMMARS)
        if self.grammar not in need:
            raise problem(
                f"{family} {families.WHY_GRAMMAR[family]}",
                f"set workload.grammar = '{need[0]}'",
                key="family",
            )
        if family in ("relog", "reuse-name", "data-ns-mix") and self.seq < 2:
            raise problem(
                f"{family} needs at least two core ops",
                "set workload.seq = 2 or 3",
                key="relog" if self.relog else "family",
            )

    def chosen_family(self) -> str:
        """``family``, or 'relog' for an older file's ``relog = true``."""
        return self.family or ("relog" if self.relog else "")

    def budget_seconds(self) -> float:
        return budget_seconds(self.budget) if self.budget else 0.0


_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def budget_seconds(text: str) -> float:
    """A duration such as '8h', '90m', '45s' or '1h30m', strictly, in seconds."""
    m = _DURATION.fullmatch(text.strip())
    seconds = 0
    if m and text.strip():
        h, mi, se = (int(g or 0) for g in m.groups())
        seconds = h * 3600 + mi * 60 + se
    if not 0 < seconds <= settings.MAX_SECONDS:
        raise problem(
            f"not a duration: {text!r}",
            "hours, minutes and seconds, e.g. '8h', '90m', '45s' or '1h30m' (at most 30 days)",
            key="budget",
        )
    return float(seconds)


class SearchScenario(ScenarioBase):
    """Generated workloads, every crash state of each checked (``kind = "search"``)."""

    kind: Literal["search"]
    fs: FsSpec
    workload: AceSpec = Field(default_factory=AceSpec)
    crash: CrashSpec = Field(default_factory=_default_crash)
    check: CheckSpec = Field(default_factory=CheckSpec)
    workloads_per_boot: int = Field(
        100, ge=1, le=1000, description="workloads one recording guest takes"
    )
    timeout: float = Field(
        300.0, gt=0, le=settings.MAX_SECONDS, description="seconds one workload may take"
    )
    keep_logs: Literal["all", "findings"] = Field(
        "all",
        description="the workloads whose dm-log-writes logs a finished run keeps: all, or "
        "those with a finding or a state the lab failed to judge (a nightly's disk)",
    )

    @model_validator(mode="after")
    def _recovery_modes(self) -> SearchScenario:
        check_recovery(self.fs, self.check)
        check_devices(self.fs, self.crash, self.check, "search")
        check_method(self.fs, self.crash)
        check_ordered(self.fs, self.workload.ordered_metadata)
        return self

    @model_validator(mode="after")
    def _control(self) -> SearchScenario:
        if self.workload.noop_sync and self.expect != "findings":
            raise problem(
                "a workload that never really syncs can only lose data",
                "it is a positive control: declare expect = 'findings'",
                key="workload.noop_sync",
            )
        return self

    def fs_types(self) -> tuple[str, ...]:
        return (str(self.fs.type),)

    def catalogue_row(self) -> tuple[str, str, str, str]:
        w = self.workload
        take = f"sample {w.sample}" if w.sample else "all"
        take += f", {w.family}" if w.family else ""
        take += f", budget {w.budget}" if w.budget else ""
        return (
            str(self.fs.type),
            str(self.fs.data_mode or "-"),
            f"ace seq-{w.seq} ({take}{f', first {w.limit}' if w.limit else ''})",
            ", ".join(st.label() for st in self.crash.states) + f" (<= {self.crash.max_states})",
        )


SETTABLE = settings.settable(SearchScenario)
for _k in ("name", "path", "extends", "overrides", "kind"):
    SETTABLE.pop(_k, None)
