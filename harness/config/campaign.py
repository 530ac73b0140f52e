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
from typing import Any

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


class CampaignFile(Settings):
    """A campaign file: scenarios x a matrix of ``--set`` overrides x seeds."""

    description: str = ""
    max_failures: int = Field(DEFAULT_MAX_FAILURES, gt=0)
    max_interruptions: int = Field(DEFAULT_MAX_INTERRUPTIONS, gt=0)
    stall_factor: float = Field(DEFAULT_STALL_FACTOR, gt=0)
    stall_floor: float = Field(DEFAULT_STALL_FLOOR, gt=0)
    run: tuple[RunSpec, ...] = Field(min_length=1)
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
            overrides = (*f.vm_overrides(), *run.set, *combo, *last)
            sc = _load_scenario(path, i, run.scenario, overrides)
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
    if not elements:
        raise InputError(f"{path}: the campaign has no runs", hint="add a [[run]] table")
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
    )


def _set_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _load_scenario(path: Path, i: int, name: str, overrides: Sequence[str]) -> Any:
    try:
        return scenario.load(name, overrides)
    except InputError as e:
        raise InputError(f"{path}: run[{i}] ({name}): {e.message}", hint=e.hint) from None
