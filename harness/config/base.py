"""The keys every scenario has, declared once: what it is (name, description, kind), how it
is drawn (seed), what a known-answer control must find (expect), and where it came from
(path, extends, overrides -- set by the loader, never written in a file).

Each experiment kind's settings model (``harness/experiments/<kind>/settings.py``, or
``harness/config/crash.py`` for crash replay) derives from :class:`ScenarioBase` and adds
its own keys; ``resolved()`` is the one way a scenario becomes the parameters stored with
its run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from harness import paths
from harness.config.vm import VmChoice

DEFAULT_SEED = 1


class ScenarioBase(VmChoice):
    """The common keys of every scenario kind."""

    name: str
    path: Path
    description: str
    kind: str
    seed: int = DEFAULT_SEED
    expect: Literal["findings", "clean"] | None = Field(
        None, description="a known-answer control: what this scenario must find"
    )
    extends: tuple[str, ...] = ()  # the chain of parents, nearest first
    overrides: tuple[str, ...] = ()  # the --set arguments applied

    # Keys of a kind's model that are derived or computed and so not part of what a run
    # is (they would only make two equal runs look different).
    not_stored: ClassVar[frozenset[str]] = frozenset()

    @field_validator("description")
    @classmethod
    def _strip(cls, v: str) -> str:
        return v.strip()

    @property
    def experiment_kind(self) -> str:
        """The experiment (``harness/experiments/<kind>/kind.py``) that runs this scenario;
        a kind with several experiments chooses by its keys."""
        return str(self.kind)

    def kernel_modules(self) -> tuple[str, ...]:
        """Out-of-tree modules its guests load besides the experiment's own (``zfs`` for
        a ZFS cell): on a kernel without them the scenario is not run."""
        return ()

    def fs_types(self) -> tuple[str, ...]:
        """The filesystems its guests make (harness/filesystems.py): on a kernel built
        without one the scenario is not run -- ReiserFS left Linux in 6.13."""
        return ()

    def catalogue_row(self) -> tuple[str, str, str, str]:
        """What ``scenario list`` shows of it: filesystems, mode, workload, states."""
        return (self.kind, "-", "-", "-")

    def resolved(self) -> dict[str, Any]:
        """Every setting with defaults filled in; JSON-able, stored with each run."""
        out = self.model_dump(
            mode="json", exclude={"path", "expect", *self.not_stored}, by_alias=True
        )
        out["path"] = paths.portable(self.path)
        # Absent rather than null when unset: a store written before every kind had the
        # key (or before kernels were chosen) resumes its runs.
        if self.expect is not None:
            out["expect"] = self.expect
        if out.get("kernel") is None:
            out.pop("kernel", None)
        return out
