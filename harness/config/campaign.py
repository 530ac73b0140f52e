"""Campaign files (``campaigns/*.toml``): a pydantic model of the file, expanded into
elements (scenario, ``--set`` overrides, seed). Every element's scenario is loaded with
its overrides while the file is read, so a bad name or value is reported before anything
runs. The engine that runs them is ``harness/campaign/runner.py``.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from harness.config import scenario, settings
from harness.config.settings import Settings, canonical_json, problem
from harness.config.vm import Backend
from harness.errors import InputError

DEFAULT_MAX_FAILURES = 2
DEFAULT_MAX_INTERRUPTIONS = 5
DEFAULT_STALL_FACTOR = 4.0
DEFAULT_STALL_FLOOR = 600.0


class RunSpec(Settings):
    """One ``[[run]]``: a scenario, a matrix of overrides, seeds."""

    scenario: str
    optional: bool = Field(False, description="skip (with a note) while it does not exist")
    set: tuple[str, ...] = Field((), description="--set overrides applied to every element")
    matrix: dict[str, list[Any]] = Field(
        default_factory=dict, description="key -> values; every combination is an element"
    )
    seeds: tuple[int, ...] = ()
    repetitions: int = Field(1, ge=1, description="seeds: the scenario's, seed + 1, ...")

    @model_validator(mode="after")
    def _check(self) -> RunSpec:
        if self.seeds and "repetitions" in self.model_fields_set:
            raise problem("give seeds or repetitions, not both", key="seeds")
        for key, values in self.matrix.items():
            if not values:
                raise problem("expected a non-empty list of values", key=f"matrix.{key}")
        return self

    def overrides(self, base: Path) -> tuple[str, ...]:
        """``set``, a workload file's relative path read from the campaign's folder (as
        ``[[bug]]``'s ``workload``), so the campaign runs from any directory."""
        key = "workload.path="
        return tuple(
            f"{key}{(base / o[len(key) :]).resolve()}"
            if o.startswith(key) and not Path(o[len(key) :]).is_absolute()
            else o
            for o in self.set
        )


class BugSpec(Settings):
    """One ``[[bug]]`` of a known-bugs catalogue (``campaigns/known-bugs.toml``): a real,
    fixed bug, its steps, the kernel package that has it and the first that has the fix.
    It becomes elements: the buggy kernel (expect findings), the fixed one (expect clean)
    and the image's own kernel (as ``image`` says)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", description="a short slug")
    fs: str
    commit: str = Field(
        pattern=r"^([0-9a-f]{12,40})?$",
        description="the upstream fix; '' when only Debian's changelog title is known (the "
        "census's note says which sources were searched)",
    )
    title: str = Field(min_length=1, description="the fix's subject line")
    fstests: str = Field("", description="the fstests test that covers it, if any")
    scenario: str = Field(description="the crash scenario the steps run in")
    workload: str = Field(description="the workload file, relative to the campaign file")
    buggy: str = Field(description="a kernel release that has the bug: 6.1.0-54-amd64")
    fixed: str = Field(
        "", description="the first kernel release that has the fix ('': none in reach)"
    )
    image: Literal["clean", "buggy", "skip"] = Field(
        "clean", description="what the image's own kernel is expected to show"
    )
    symptom: str = Field(min_length=1, description="what a crash state shows on the buggy one")
    set: tuple[str, ...] = Field((), description="--set overrides (mkfs options, states)")
    reproduces: bool = Field(True, description="false: kept in the table with the reason")
    reason: str = Field("", description="why it does not reproduce here (race, ENOSPC, ...)")

    @model_validator(mode="after")
    def _reason(self) -> BugSpec:
        if not self.reproduces and not self.reason:
            raise problem("a bug that does not reproduce needs its reason", key="reason")
        return self

    def elements(self, base: Path) -> list[tuple[str, tuple[str, ...]]]:
        """(role, overrides) of each element: buggy, fixed, image."""
        if not self.reproduces:
            return []
        steps = ("workload.type=file", f"workload.path={(base / self.workload).resolve()}")
        out = [("buggy", (*steps, *self.set, f"kernel={self.buggy}", "expect=findings"))]
        if self.fixed:
            out.append(("fixed", (*steps, *self.set, f"kernel={self.fixed}", "expect=clean")))
        if self.image != "skip":
            expect = "findings" if self.image == "buggy" else "clean"
            out.append(("image", (*steps, *self.set, f"expect={expect}")))
        return out


class CampaignFile(Settings):
    """A campaign file: scenarios x a matrix of ``--set`` overrides x seeds, and known
    bugs (``[[bug]]``), each on the kernels that have and do not have it."""

    description: str = ""
    max_failures: int = Field(DEFAULT_MAX_FAILURES, gt=0)
    max_interruptions: int = Field(DEFAULT_MAX_INTERRUPTIONS, gt=0)
    stall_factor: float = Field(DEFAULT_STALL_FACTOR, gt=0)
    stall_floor: float = Field(DEFAULT_STALL_FLOOR, gt=0)
    run: tuple[RunSpec, ...] = ()
    bug: tuple[BugSpec, ...] = ()
    # Applied to every element before its own `set` (harness/config/vm.py).
    backend: Backend | None = Field(None, description="the VM backend of every element")
    libvirt_uri: str | None = Field(None, description="libvirt URI of every element")
    libvirt_pool: str | None = Field(
        None, description="libvirt storage pool of every element (see libvirt_pool)"
    )

    def vm_overrides(self) -> tuple[str, ...]:
        keys = (
            ("backend", self.backend),
            ("libvirt_uri", self.libvirt_uri),
            ("libvirt_pool", self.libvirt_pool),
        )
        return tuple(f"{k}={v}" for k, v in keys if v is not None)


@dataclass(frozen=True)
class Element:
    position: int
    scenario: str
    overrides: tuple[str, ...]
    seed: int | None
    bug: tuple[str, str] | None = None  # a known bug's (name, role): not part of its key

    @property
    def key(self) -> str:
        return canonical_json(
            {"scenario": self.scenario, "set": list(self.overrides), "seed": self.seed}
        )

    @property
    def label(self) -> str:
        parts = [self.scenario, *self.overrides]
        if self.seed is not None:
            parts.append(f"seed={self.seed}")
        return " ".join(parts)


@dataclass(frozen=True)
class Campaign:
    name: str
    path: Path
    description: str
    elements: tuple[Element, ...]
    max_failures: int = DEFAULT_MAX_FAILURES
    max_interruptions: int = DEFAULT_MAX_INTERRUPTIONS
    stall_factor: float = DEFAULT_STALL_FACTOR
    stall_floor: float = DEFAULT_STALL_FLOOR
    skipped: tuple[str, ...] = ()  # optional scenarios that do not exist (yet)
    bugs: tuple[BugSpec, ...] = ()

    @property
    def spec_hash(self) -> str:
        keys = "\n".join(e.key for e in self.elements)
        return hashlib.sha256(keys.encode()).hexdigest()[:16]


def load(path: Path, last: Sequence[str] = ()) -> Campaign:
    """Read and validate a campaign file; every element's scenario is loaded with its
    overrides, so a bad name or ``--set`` is reported before anything runs. ``last`` are
    overrides after every element's own (``--backend`` on the command line).

    :raise InputError: naming the file, the key and the bad value.
    """
    if not path.is_file():
        raise InputError(f"{path}: no such campaign file", hint="e.g. campaigns/ci.toml")
    f: CampaignFile = settings.validate(path, CampaignFile, settings.load_toml(path))
    elements: list[Element] = []
    seen: set[str] = set()
    skipped: list[str] = []
    for i, run in enumerate(f.run):
        try:
            scenario.locate(run.scenario)
        except InputError as e:
            if run.optional:
                skipped.append(run.scenario)
                continue
            raise InputError(f"{path}: run[{i}].scenario: {e.message}", hint=e.hint) from None
        axes = [[f"{k}={_set_value(v)}" for v in values] for k, values in run.matrix.items()]
        for combo in itertools.product(*axes):
            overrides = (*f.vm_overrides(), *run.overrides(path.parent), *combo, *last)
            sc = _load_scenario(path, f"run[{i}]", run.scenario, overrides)
            seeds = run.seeds or tuple(sc.seed + r for r in range(run.repetitions))
            for seed in seeds:
                el = Element(len(elements), run.scenario, overrides, seed)
                if el.key in seen:
                    raise InputError(
                        f"{path}: key 'run[{i}].scenario' = {run.scenario!r}: "
                        f"element {el.label!r} is listed twice"
                    )
                seen.add(el.key)
                elements.append(el)
    for i, bug in enumerate(f.bug):
        for role, overrides in bug.elements(path.parent):
            where = f"bug[{i}] ({bug.name}, {role})"
            sc = _load_scenario(path, where, bug.scenario, (*f.vm_overrides(), *overrides, *last))
            el = Element(len(elements), bug.scenario, (*f.vm_overrides(), *overrides, *last),
                         sc.seed, (bug.name, role))  # fmt: skip
            elements.append(el)
    if not elements:
        raise InputError(
            f"{path}: the campaign has no runs", hint="add a [[run]] or a [[bug]] table"
        )
    return Campaign(
        path.stem,
        path,
        f.description.strip(),
        tuple(elements),
        f.max_failures,
        f.max_interruptions,
        f.stall_factor,
        f.stall_floor,
        tuple(skipped),
        f.bug,
    )


def _set_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _load_scenario(path: Path, where: str, name: str, overrides: Sequence[str]) -> Any:
    try:
        return scenario.load(name, overrides)
    except InputError as e:
        raise InputError(f"{path}: {where} ({name}): {e.message}", hint=e.hint) from None
