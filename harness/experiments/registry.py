"""Experiment kinds, each one folder and one record.

A kind is a package ``harness/experiments/<kind>/`` whose ``kind.py`` defines ``KIND``, a
:class:`Kind` naming everything the rest of the lab needs from it:

- ``settings``: its scenario model (a :class:`~harness.config.base.ScenarioBase`), which
  the scenario loader validates a file with when the file says ``kind = "<name>"``, and
  which the JSON Schema is made from;
- ``run_kind``: the ``runs.kind`` its runs are stored under;
- ``experiments``: the :class:`~harness.experiments.lifecycle.Experiment` classes it runs,
  by the ``experiment_kind`` a scenario names (one kind may choose among several by its
  keys), each with the summary body ``scenario run`` prints. Each class's ``expected()``
  is its counting rule (``harness/outcome.py``);
- ``tables``, ``plots``, ``panels``: the reports over its stored items -- ``results
  table`` kinds, ``results plot`` charts, the dashboard's charts (``harness/report/``
  defines them; ``query.table_kinds()``, ``query.plots()``, ``query.panels()`` read them
  here, the one list).

Kinds are found by listing the folders, so adding one touches nothing outside its folder
and its scenarios (``docs/layout.md`` walks through it). They are imported only when first
asked for: importing one pulls in the guest and store machinery, which loading a scenario
file must not need at import time.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.errors import InputError

if TYPE_CHECKING:
    from rich.console import Console

    from harness.config.base import ScenarioBase
    from harness.experiments.lifecycle import Experiment, Report
    from harness.report.query import Panel, Plot, TableKind

Body = Callable[["Console", "Report"], None]

# The kind of a scenario file that names none: crash replay came first.
DEFAULT_KIND = "crash"


@dataclass(frozen=True)
class Variant:
    """One experiment of a kind: its class, the body of its end-of-run summary, and what
    it needs of the guest kernel -- ``CONFIG_*`` options (a kernel without one is bad
    input) and out-of-tree modules, ``dm-dust`` or ``zfs`` (without one: not run)."""

    experiment: type[Experiment]
    body: Body
    kernel_options: tuple[str, ...] = ()
    kernel_modules: tuple[str, ...] = ()


@dataclass(frozen=True)
class Kind:
    """The registration record of one experiment kind; see the module docstring."""

    name: str
    settings: type[ScenarioBase]
    run_kind: str
    experiments: Mapping[str, Variant]
    settable: Mapping[str, Any] = field(default_factory=dict)
    aliases: Mapping[str, str] = field(default_factory=dict)
    tables: tuple[TableKind, ...] = ()
    plots: tuple[Plot, ...] = ()
    panels: tuple[Panel, ...] = ()


@functools.cache
def kinds() -> dict[str, Kind]:
    """Every kind, by the name a scenario file's ``kind`` key gives."""
    import harness.experiments as pkg

    found: dict[str, Kind] = {}
    for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if not m.ispkg:
            continue
        try:
            mod = importlib.import_module(f"{pkg.__name__}.{m.name}.kind")
        except ModuleNotFoundError as e:
            if e.name != f"{pkg.__name__}.{m.name}.kind":
                raise
            continue  # a folder of shared code, not a kind
        k: Kind = mod.KIND
        found[k.name] = k
    return found


def kind_named(name: str, where: str = "") -> Kind:
    """The kind a scenario file names. :raise InputError: an unknown one, listing them."""
    ks = kinds()
    if name not in ks:
        raise InputError(
            f"{where}key 'kind' = {name!r}: no such experiment kind",
            hint="known kinds: " + ", ".join(sorted(ks)),
        )
    return ks[name]


def variants() -> dict[str, Variant]:
    """Every experiment of every kind, by its ``experiment_kind`` name."""
    return {n: v for k in kinds().values() for n, v in k.experiments.items()}


def experiment(sc: Any) -> tuple[Kind, type[Experiment]]:
    """The kind and the experiment class that run scenario ``sc``."""
    k = kind_named(str(sc.kind), f"{sc.path}: ")
    name = str(sc.experiment_kind)
    if name not in k.experiments:
        raise InputError(
            f"{sc.path}: kind {k.name!r} has no experiment {name!r}",
            hint="known: " + ", ".join(sorted(k.experiments)),
        )
    return k, k.experiments[name].experiment


def variant(sc: Any) -> Variant:
    k, _ = experiment(sc)
    return k.experiments[str(sc.experiment_kind)]


def body(exp: type[Experiment]) -> Body:
    """The summary body of an experiment class (a subclass finds its parent's)."""
    by_class = {v.experiment: v.body for v in variants().values()}
    for cls in exp.__mro__:
        if cls in by_class:
            return by_class[cls]
    raise KeyError(f"{exp.__name__} is registered by no kind")


def run_kind(exp: type[Experiment]) -> str:
    for k in kinds().values():
        if any(issubclass(exp, v.experiment) for v in k.experiments.values()):
            return k.run_kind
    raise KeyError(f"{exp.__name__} is registered by no kind")
