"""Findings already triaged (``docs/findings/known.toml``), so a nightly's reader sees
what is new.

A search cluster (``harness.report.search.KEY``: filesystem, outcome, rule, role, op
class) whose symptom matches an entry is labelled with the entry's name, its verdict and
the document that argues it, in ``results bugs`` and ``results diff --by cluster``. A
known finding is still a finding: nothing is dropped from the store, and a run's exit
status is unchanged (the labels are for the reader; a stock kernel that loses data
still does).

An entry matches on the keys it gives (each value, or any of a list; a single op class
also matches a seq-2/3 workload whose '+'-joined classes hold it); a key it leaves out
matches anything, so ``op_class = ["unlink-held", "rmdir-held"]`` with ``fs = "btrfs"``
covers every rule and role those op classes showed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

from pydantic import Field, field_validator
from rich.console import Console

from harness import paths
from harness.config import settings

KNOWN = paths.REPO / "docs" / "findings" / "known.toml"


class Known(settings.Settings):
    """One triaged cluster of findings."""

    name: str = Field(min_length=1, description="a short name, shown beside the cluster")
    verdict: str = Field(
        min_length=1, description="what it is, in a line: kernel bug, not POSIX, fixed in ..."
    )
    doc: str = Field(min_length=1, description="the document that argues it (from the repo)")
    fs: list[str] = Field(min_length=1, description="the filesystems it is seen on")
    outcome: list[str] = Field(default_factory=list, description="outcomes (empty: any)")
    rule: list[str] = Field(default_factory=list, description="oracle rules (empty: any)")
    role: list[str] = Field(default_factory=list, description="the broken name's roles")
    op_class: list[str] = Field(default_factory=list, description="op classes (empty: any)")

    @field_validator("fs", "outcome", "rule", "role", "op_class", mode="before")
    @classmethod
    def _one_or_many(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v

    @field_validator("doc")
    @classmethod
    def _exists(cls, v: str) -> str:
        if not (paths.REPO / v).is_file():
            raise settings.problem(f"no such document: {v}", "a path from the repository's top")
        return v

    def matches(self, symptom: Mapping[str, str]) -> bool:
        """The symptom's keys (``search.KEY``) each among the entry's values, if it gives any."""
        keys = {"fs": self.fs, "outcome": self.outcome, "rule": self.rule, "role": self.role,
                "op_class": self.op_class}  # fmt: skip
        return all(not want or _among(k, symptom.get(k, ""), want) for k, want in keys.items())


def _among(key: str, value: str, want: list[str]) -> bool:
    """A search's op class is its ops' classes joined by '+' (seq-2, seq-3): an entry's
    single class matches a workload holding it, a joined one only itself."""
    return value in want or (key == "op_class" and any(w in value.split("+") for w in want))


class KnownFile(settings.Settings):
    finding: list[Known] = Field(default_factory=list)


@cache
def load(path: Path = KNOWN) -> tuple[Known, ...]:
    """The catalogue.

    :raise InputError: naming the file, the key and the value.
    """
    f: KnownFile = settings.validate(path, KnownFile, settings.load_toml(path))
    return tuple(f.finding)


def label(symptom: Mapping[str, str], known: Sequence[Known] | None = None) -> Known | None:
    """The first catalogue entry the symptom matches; None: a new finding."""
    return next((k for k in (load() if known is None else known) if k.matches(symptom)), None)


def to_json(symptom: Mapping[str, str]) -> dict[str, str] | None:
    """The label as ``--json`` carries it (None: new)."""
    k = label(symptom)
    return {"name": k.name, "verdict": k.verdict, "doc": k.doc} if k else None


def print_labels(console: Console, symptoms: Sequence[Mapping[str, str]]) -> None:
    """Under a table of clusters numbered from 1: each known finding once, with the
    clusters it labels, and how many clusters are new (not in docs/findings/known.toml)."""
    by_name: dict[str, tuple[Known, list[int]]] = {}
    for i, s in enumerate(symptoms, 1):
        if k := label(s):
            by_name.setdefault(k.name, (k, []))[1].append(i)
    for k, at in by_name.values():
        nums = ", ".join(map(str, at))
        console.print(f"known {k.name} ({nums}): {k.verdict}; {k.doc}", markup=False)
    n_known = sum(len(at) for _, at in by_name.values())
    console.print(
        f"{len(symptoms) - n_known} new, {n_known} known (docs/findings/known.toml)",
        markup=False,
    )
