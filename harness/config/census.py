"""The census of the year's crash-consistency fixes (``campaigns/census.toml``, issue 46):
every such fix of ext4, jbd2, xfs, btrfs and f2fs in the Debian changelogs of the
reachable kernel packages, and the lab's reach over it -- caught (a ``[[bug]]`` of the
known-bugs catalogue catches it), expressible (the lab could, and why it has not yet) or
not expressible (the capabilities it lacks, from ``NEEDS``).

The vocabularies are closed sets, so ``needs`` can be counted: the counts say which
capability would bring how many fixes into reach, and feed the next issue. A caught
entry must name a catalogue bug with the same commit, and every bug the catalogue
reproduces must be a caught entry, so the census and the catalogue cannot drift apart.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from harness.config import settings
from harness.config.campaign import CampaignFile
from harness.config.settings import Settings, problem
from harness.errors import InputError
from harness.model import ace
from harness.model.families import FAMILIES

DEFAULT_PATH = Path("campaigns/census.toml")


class Reach(StrEnum):
    CAUGHT = "caught"
    EXPRESSIBLE = "expressible"
    NOT_EXPRESSIBLE = "not-expressible"


# What a not-expressible fix needs that the lab lacks: one word each, so the counts add up.
NEEDS: dict[str, str] = {
    "timestamps": "times the oracle does not judge (atime; rule 20 judges mtime and ctime)",
    "ro-mount": "a read-only mount of the crash state (recovery's dry run)",
    "ro-device": "a read-only block device under the mount",
    "norecovery": "a mount that skips log replay (norecovery / nologreplay)",
    "remount-after-recovery": "a second mount cycle after the recovering one",
    "shutdown": "the filesystem's shutdown ioctl (FS_IOC_SHUTDOWN, EXT4_IOC_SHUTDOWN)",
    "enospc": "a full filesystem at the crash",
    "race": "two processes at once on the same inodes (workload.processes keeps them apart)",
    "external-log": "an external journal or log device",
    "multi-device": "a filesystem over several devices",
    "fast-commit": "ext4 fast commits (mkfs -O fast_commit) and a reader of their blocks",
    "crash-between-transactions": "a crash inside one operation that spans transactions",
    "corrupt-image": "a damaged log or image given to recovery (hardening)",
    "online-resize": "growing a mounted filesystem",
    "quota": "quotas enabled",
    "mount-option": "a mkfs or mount option the lab does not make",
    "error-injection": "an I/O or allocation error at a chosen point inside the kernel",
    "ioctl": "a filesystem-specific ioctl the lab's ops lack (balance, exchange-range, "
    "atomic writes)",
    "other": "something else, said in `why`",
}
FS = Literal["ext4", "jbd2", "xfs", "btrfs", "f2fs"]
AREA = Literal["durability", "replay", "recovery", "fsck", "orphan"]
# Where the nightly search (campaigns/nightly.toml) meets a fix's shape untold: an op
# family (harness/model/families.py), ACE's seq-1 whole, the ace-n slices, or none.
NIGHTLY: tuple[str, ...] = (*FAMILIES, "ace-seq1", "ace-n-slice", "none")
PACKAGE = r"^6\.(1\.0-[0-9]+|12\.[0-9]+\+deb12)-amd64$"


class Fix(Settings):
    """One ``[[fix]]``: an upstream fix, the packages that have it, and the lab's reach."""

    commit: str = Field(pattern=r"^([0-9a-f]{12,40})?$", description="'' if not found")
    title: str = Field(min_length=1, description="the changelog's line, exactly")
    fs: FS
    area: AREA
    fstests: str = Field("", description="the fstests test that covers it, if any")
    fixed_in: tuple[str, ...] = Field(description="the first package of each line with it")
    buggy: tuple[str, ...] = Field(description="the last package of each line without it")
    reach: Reach
    bug: str = Field("", description="caught: the known-bugs [[bug]] that catches it")
    needs: tuple[str, ...] = Field((), description="not-expressible: what the lab lacks")
    why: str = Field("", description="expressible: why not caught yet; 'other': what")
    nightly: str = Field("", description="the nightly family or slice meeting its shape")
    nightly_why: str = ""
    shapes: tuple[str, ...] = Field(
        (),
        description="ACE steps that show the bug, spelt as `ace describe` spells them "
        "('truncate-zero(foo) fsync(foo); link(foo, bar) fsync_dir()'): where the nightly "
        "meets them says after how many nights (harness/campaign/nights.py)",
    )
    basis: Literal["commit", "title", "catalogue"] = Field(
        description="what the classification read: the commit, the title alone, or the "
        "known-bugs catalogue's reading (docs/known-bugs.md)"
    )
    note: str = ""

    @model_validator(mode="after")
    def _check(self) -> Fix:
        for key in ("fixed_in", "buggy"):
            for i, pkg in enumerate(getattr(self, key)):
                if not _is_package(pkg):
                    raise problem(
                        f"{pkg!r} is not a reachable package release",
                        hint="e.g. 6.1.0-55-amd64 or 6.12.69+deb12-amd64",
                        key=f"{key}[{i}]",
                    )
        if not self.commit and not self.note:
            raise problem("a fix without its commit needs a note saying why", key="note")
        if self.reach is Reach.CAUGHT and not self.bug:
            raise problem(
                "a caught fix names the [[bug]] that catches it", key="bug",
                hint="a name from campaigns/known-bugs.toml",
            )  # fmt: skip
        if self.reach is not Reach.CAUGHT and self.bug:
            raise problem(f"only a caught fix names a bug (reach is {self.reach})", key="bug")
        if self.reach is Reach.EXPRESSIBLE and not self.why:
            raise problem("an expressible fix says why the lab has not caught it", key="why")
        self._check_needs()
        self._check_nightly()
        return self

    def _check_needs(self) -> None:
        if self.reach is not Reach.NOT_EXPRESSIBLE:
            if self.needs:
                raise problem(f"only a not-expressible fix has needs (reach is {self.reach})",
                              key="needs")  # fmt: skip
            return
        if not self.needs:
            raise problem("a not-expressible fix lists what the lab lacks", key="needs",
                          hint="one or more of: " + ", ".join(NEEDS))  # fmt: skip
        for i, need in enumerate(self.needs):
            if need not in NEEDS:
                raise problem(f"not one of {', '.join(NEEDS)}", key=f"needs[{i}]",
                              hint=_close(need, NEEDS))  # fmt: skip
        if "other" in self.needs and not self.why:
            raise problem("need 'other' says what in why", key="why")

    def _check_nightly(self) -> None:
        if self.reach is Reach.NOT_EXPRESSIBLE:
            if self.nightly:
                raise problem("a not-expressible fix has no nightly search", key="nightly")
            return
        if self.nightly not in NIGHTLY:
            raise problem(f"not one of {', '.join(NIGHTLY)}", key="nightly",
                          hint=_close(self.nightly, NIGHTLY))  # fmt: skip
        if self.nightly == "none" and not self.nightly_why:
            raise problem("nightly 'none' says why in nightly_why", key="nightly_why")
        if self.nightly != "none" and not self.shapes:
            raise problem(
                f"nightly {self.nightly!r} gives the shapes it meets", key="shapes",
                hint="ACE steps as `python3 -m harness.guest.ace list` spells them",
            )  # fmt: skip
        steps = _steps()
        for i, shape in enumerate(self.shapes):
            for step in (s.strip() for s in shape.split(";")):
                if step not in steps:
                    raise problem(f"{step!r} is no ACE step (ace-n's, as describe spells it)",
                                  key=f"shapes[{i}]", hint=_close(step, steps))  # fmt: skip


@functools.cache
def _steps() -> frozenset[str]:
    """Every step ace-n (which holds ace and ace-x) can spell."""
    return frozenset(ace.unit_label(c, p) for c, p in ace.units(False, "ace-n"))


def _is_package(name: str) -> bool:
    return re.match(PACKAGE, name) is not None


def _close(value: str, options: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(value, list(options), n=1)
    return f"did you mean {close[0]!r}?" if close else None


class Nightly(Settings):
    """``[nightly]``: the campaign whose search meets the fixes' shapes, and its pace."""

    campaign: str = Field("nightly.toml", description="relative to the census file")
    workloads_per_hour: float = Field(
        gt=0, description="workloads a budget's hour records and checks (measured)"
    )
    rate_source: str = Field(min_length=1, description="the measurement the rate comes from")


class CensusFile(Settings):
    """The file: what was read, and one ``[[fix]]`` per crash-consistency fix."""

    description: str = ""
    known_bugs: str = Field(
        "known-bugs.toml", description="the catalogue caught fixes name, relative to the file"
    )
    nightly: Nightly | None = Field(None, description="without it, no nights are computed")
    fix: tuple[Fix, ...] = Field(min_length=1)


@dataclass(frozen=True)
class Census:
    path: Path
    description: str
    fixes: tuple[Fix, ...]
    nightly: Nightly | None

    def of(self, reach: Reach) -> list[Fix]:
        return [f for f in self.fixes if f.reach is reach]

    def ratios(self) -> tuple[float, float]:
        """(caught / total, (caught + expressible) / total)."""
        n = len(self.fixes)
        caught = len(self.of(Reach.CAUGHT))
        return caught / n, (caught + len(self.of(Reach.EXPRESSIBLE))) / n

    def needs_counts(self) -> list[tuple[str, int, int]]:
        """(need, fixes naming it, fixes it alone would bring into reach), most named
        first: the second count is what adding that one capability buys."""
        named: Counter[str] = Counter()
        alone: Counter[str] = Counter()
        for f in self.of(Reach.NOT_EXPRESSIBLE):
            named.update(set(f.needs))
            if len(set(f.needs)) == 1:
                alone[f.needs[0]] += 1
        order = sorted(named, key=lambda k: (-named[k], -alone[k], k))
        return [(k, named[k], alone[k]) for k in order]

    def by_fs(self) -> dict[str, Counter[str]]:
        """fs -> reach -> count."""
        out: dict[str, Counter[str]] = {}
        for f in self.fixes:
            out.setdefault(f.fs, Counter())[str(f.reach)] += 1
        return out


def load(path: Path = DEFAULT_PATH) -> Census:
    """Read and validate a census file against its known-bugs catalogue.

    :raise InputError: naming the file, the key and the bad value.
    """
    if not path.is_file():
        raise InputError(f"{path}: no such census file", hint=f"e.g. {DEFAULT_PATH}")
    f: CensusFile = settings.validate(path, CensusFile, settings.load_toml(path))
    _check_titles(path, f)
    _check_catalogue(path, f, path.parent / f.known_bugs)
    return Census(path, f.description.strip(), f.fix, f.nightly)


def _check_titles(path: Path, f: CensusFile) -> None:
    seen: dict[str, int] = {}
    for i, fix in enumerate(f.fix):
        if fix.title in seen:
            raise InputError(
                f"{path}: key 'fix[{i}].title' = {fix.title!r}: listed twice",
                hint=f"also fix[{seen[fix.title]}]",
            )
        seen[fix.title] = i


def _check_catalogue(path: Path, f: CensusFile, catalogue: Path) -> None:
    """Caught entries name real catalogue bugs with their commit; every bug the catalogue
    reproduces is a caught entry."""
    # Only the file's model is validated, not its scenarios: the census is read on hosts
    # with no image, and a campaign's elements are no concern of it.
    kb: CampaignFile = settings.validate(catalogue, CampaignFile, settings.load_toml(catalogue))
    bugs = {b.name: b for b in kb.bug}
    caught = {}
    for i, fix in enumerate(f.fix):
        if fix.reach is not Reach.CAUGHT:
            continue
        b = bugs.get(fix.bug)
        if b is None:
            raise InputError(
                f"{path}: key 'fix[{i}].bug' = {fix.bug!r}: no such [[bug]] in {catalogue}",
                hint=_close(fix.bug, bugs) or "valid: " + ", ".join(bugs),
            )
        if not b.reproduces:
            raise InputError(
                f"{path}: key 'fix[{i}].bug' = {fix.bug!r}: the catalogue keeps it as not "
                "reproducible, so it catches nothing",
                hint="make the fix expressible and say why",
            )
        if fix.commit:
            same = b.commit.startswith(fix.commit) or fix.commit.startswith(b.commit or "-")
        else:  # a fix known by its changelog title alone: the catalogue names it so too
            same = not b.commit and fix.title.startswith(b.title)
        if not same:
            raise InputError(
                f"{path}: key 'fix[{i}].commit' = {fix.commit!r}: {fix.bug} in {catalogue} "
                f"is commit {b.commit or '(none: the title ' + repr(b.title) + ')'}",
                hint="a caught fix's commit is its catalogue bug's",
            )
        caught[fix.bug] = i
    missing = [b.name for b in kb.bug if b.reproduces and b.name not in caught]
    if missing:
        raise InputError(
            f"{path}: the catalogue {catalogue} catches {', '.join(missing)}, which no caught "
            "[[fix]] names",
            hint="add a [[fix]] with reach = 'caught' and bug = its name",
        )
