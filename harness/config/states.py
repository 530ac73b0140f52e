"""Crash-state generator specs: ``[[crash.states]]`` items, one model per generator.

The one declaration of each generator's parameters and defaults: the scenario loader
validates with these models, and ``harness.replay.crashstates.generate`` validates the
specs it is handed (tests pass plain dicts) with the same ones, so the two can no longer
disagree about which keys a generator takes or what they default to.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from harness.config import settings
from harness.config.settings import Settings, problem

TornMode = Literal["first-sector", "half", "blocks"]
TornOnly = Literal["fua", "flush", "metadata"]
TORN_MODES: tuple[TornMode, ...] = ("first-sector", "half", "blocks")


class _State(Settings):
    def params(self) -> dict[str, Any]:
        """Keyword arguments for the generator (everything but ``kind``)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self if k != "kind"}

    def label(self) -> str:
        """``reorder(32)``: the kind and the values set away from their defaults."""
        given = self.model_dump(exclude_defaults=True, exclude={"kind"})
        args = ", ".join(str(v) for v in given.values())
        kind = getattr(self, "kind", "")
        return f"{kind}({args})" if args else str(kind)


class AtFlushes(_State):
    """After every FLUSH."""

    kind: Literal["flush"]


class AtFuas(_State):
    """After every FUA write."""

    kind: Literal["fua"]


class AtMarks(_State):
    """Exactly at every mark (after mkfs, after each fsync the workload saw return)."""

    kind: Literal["mark"]


class Every(_State):
    """Every ``n`` log entries."""

    kind: Literal["every"]
    n: int = Field(ge=1, description="log entries between two states")


class Percent(_State):
    """At percentages of the log."""

    kind: Literal["percent"]
    at: tuple[Annotated[float, Field(ge=0, le=100)], ...] = Field(
        min_length=1, description="percentages of the log, 0..100"
    )


class Reorder(_State):
    """Power fails before a FLUSH completes: subsets of the writes since the previous
    FLUSH (FUA writes excepted) are lost."""

    kind: Literal["reorder"]
    max_states: int = Field(64, ge=1, description="at most this many states (seeded sample)")
    per_point: int = Field(16, ge=1, description="subsets per crash point, exhaustive below")


class Torn(_State):
    """Power fails during a multi-sector write, which persists only in part."""

    kind: Literal["torn"]
    max_states: int = Field(64, ge=1)
    modes: tuple[TornMode, ...] = Field(TORN_MODES, min_length=1, description="how it tears")
    only: tuple[TornOnly, ...] = Field((), description="only writes with these flags")

    @model_validator(mode="after")
    def _distinct(self) -> Torn:
        if len(set(self.modes)) != len(self.modes):
            raise problem("a mode is listed twice")
        return self


StateSpec = Annotated[
    AtFlushes | AtFuas | AtMarks | Every | Percent | Reorder | Torn, Field(discriminator="kind")
]
KINDS = ("flush", "fua", "mark", "every", "percent", "reorder", "torn")


class _One(Settings):
    state: StateSpec


def parse_state(where: str, spec: Mapping[str, Any]) -> Any:
    """One spec (a mapping, e.g. from a test or a campaign) as its model.

    :raise InputError: naming ``where``, the key and the value, like a scenario file.
    """
    return settings.validate(Path(where), _One, {"state": dict(spec)}).state
