"""Scenarios: TOML files in ``scenarios/`` validated into frozen dataclasses.

A scenario names the file system and how it is made and mounted, the workload, which
crash states to generate from the write log, how to check them and how to record. The
models below are the one declaration of every key, its default and its check
(``harness/config/settings.py``); a typo or a bad value is an ``InputError`` naming the
file, the key and the value (and the closest valid key), never a default.

``extends = "other"`` starts from ``scenarios/other.toml`` and overrides it key by key
(tables merge, everything else -- lists included -- replaces), which is how each CI-sized
scenario gets its ``-large`` campaign variant without repeating itself. ``--set`` applies
dotted-key overrides (``fs.type=xfs``, ``workload.ops=500``, or a unique leaf such as
``disk_size=1G``) to the merged data before validation, so they get the same checks.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import paths
from harness.config import settings
from harness.config.base import ScenarioBase
from harness.config.crash import (
    JOURNALED_DATA_MODES,
    Kind,
    Scenario,
)
from harness.config.settings import load_toml
from harness.errors import InputError

# Any kind's scenario: what the loader returns. Callers that need a kind's own keys
# narrow it (isinstance) or take the model they know.
AnyScenario = ScenarioBase


@dataclass(frozen=True)
class Broken:
    """A scenario file that did not load, as ``scenario list`` shows it."""

    name: str
    path: Path
    error: str


def names(directory: Path | None = None) -> list[str]:
    d = directory or paths.scenarios_dir()
    return sorted(p.stem for p in d.glob("*.toml")) if d.is_dir() else []


def locate(name_or_path: str | Path) -> Path:
    """A scenario name (``ext4-ordered-fsync``) or a path to a TOML file."""
    s = str(name_or_path)
    if "/" in s or s.endswith(".toml"):
        p = Path(s)
        if not p.is_file():
            raise InputError(f"{p}: no such scenario file")
        return p
    p = paths.scenarios_dir() / f"{s}.toml"
    if not p.is_file():
        close = difflib.get_close_matches(s, names(), n=3, cutoff=0.5)
        hint = ("did you mean " + " or ".join(repr(c) for c in close) + "? ") if close else ""
        raise InputError(
            f"unknown scenario {s!r} (looked for {p})",
            hint=hint + "'scenario list' shows them all",
        )
    return p


def load(name_or_path: str | Path, overrides: Sequence[str] = ()) -> AnyScenario:
    """Load and validate a scenario; ``overrides`` are ``key=value`` strings (``--set``)."""
    path = locate(name_or_path)
    data, chain = _raw(path, ())
    name = data.get("name", path.stem)
    if name != path.stem:
        raise InputError(
            f"{path}: key 'name' = {name!r}: must match the file name {path.stem!r}",
            hint="or leave it out",
        )
    return build(path, {**data, "name": path.stem}, overrides, chain)


def build(
    path: Path, data: dict[str, Any], overrides: Sequence[str] = (), chain: tuple[str, ...] = ()
) -> AnyScenario:
    """A scenario from ``data`` -- a file's keys, or a command's flags (``scenario
    check-log``) -- with ``overrides`` applied; errors name ``path``."""
    # The kind's own record says how its files validate (harness/experiments/registry.py).
    from harness.experiments.registry import DEFAULT_KIND, kind_named

    kind = kind_named(str(data.get("kind", DEFAULT_KIND)), f"{path}: ")
    model, keys, aliases = kind.settings, kind.settable, kind.aliases
    touched: list[str] = []
    if overrides:
        given = settings.parse_overrides(path, overrides, keys, aliases)
        touched = settings.dotted_keys(given)
        data = _merge(data, given)
        fs = data.get("fs")
        # --set fs.type=xfs on an ext4 scenario: its data mode went with its type.
        if (
            "fs.type" in touched
            and "fs.data_mode" not in touched
            and isinstance(fs, dict)
            and fs.get("type") not in [str(t) for t in JOURNALED_DATA_MODES]
        ):
            data["fs"] = {k: v for k, v in fs.items() if k != "data_mode"}
        # --set fs.mkfs_options='["-O", "^has_journal"]': its data mode went with the
        # journal (ext4 will not mount a journal-less filesystem with any data=).
        if (
            "fs.mkfs_options" in touched
            and "fs.data_mode" not in touched
            and isinstance(fs, dict)
            and any("^has_journal" in str(o) for o in fs.get("mkfs_options", ()))
        ):
            data["fs"] = {k: v for k, v in data["fs"].items() if k != "data_mode"}
        # --set workload.type=file (--workload-file) on an op-generator scenario: the
        # generator's keys went with its type; what was set stays.
        if "workload.type" in touched and isinstance(data.get("workload"), dict):
            data["workload"] = dict(given.get("workload", {}))
    full = {**data, "path": path, "extends": chain}
    # The seed has a value of its own in the run's parameters: how it was given (--seed,
    # --set seed=, a campaign's seeds) must not make two runs of one setting.
    full["overrides"] = tuple(
        o for o in overrides if settings.override_key(path, o, keys, aliases) != "seed"
    )
    sc: AnyScenario = settings.validate(path, model, full, touched)
    return sc


def seeded(overrides: Sequence[str], seed: int | None) -> tuple[str, ...]:
    """``overrides`` with ``--seed N`` (or a campaign element's seed) as the ``seed=N`` it
    stands for: one way in for the seed, so a run is the same however it was given. Last,
    so it wins over a ``--set seed=`` like every flag over ``--set``."""
    return (*overrides, f"seed={seed}") if seed is not None else tuple(overrides)


def survey(
    directory: Path | None = None,
) -> tuple[list[AnyScenario], list[Broken]]:
    """Every scenario file, crash and ZFS; those that fail to load come back as ``Broken``."""
    d = directory or paths.scenarios_dir()
    good: list[AnyScenario] = []
    bad: list[Broken] = []
    for name in names(d):
        path = d / f"{name}.toml"
        try:
            good.append(load(path))
        except InputError as e:
            bad.append(Broken(name, path, e.message + (f" ({e.hint})" if e.hint else "")))
    return good, bad


def catalogue() -> list[AnyScenario]:
    """Every scenario that loads; ``survey`` also reports the broken ones."""
    return survey()[0]


def _raw(path: Path, seen: tuple[Path, ...]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The file's data merged over its ``extends`` parents, and the parent chain."""
    if path.resolve() in seen:
        chain = " -> ".join(p.stem for p in (*seen, path.resolve()))
        raise InputError(f"{path}: 'extends' makes a loop: {chain}")
    data = load_toml(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data, ()
    if not isinstance(parent, str):
        raise InputError(f"{path}: key 'extends' = {parent!r}: expected a scenario name")
    # A sibling first (a folder of one's own scenarios), then the lab's: a user's TOML
    # anywhere may extend a shipped scenario by name.
    ppath = path.parent / f"{parent}.toml"
    if not ppath.is_file():
        ppath = paths.scenarios_dir() / f"{parent}.toml"
    if not ppath.is_file():
        close = difflib.get_close_matches(parent, names(path.parent), n=1)
        hint = f"did you mean {close[0]!r}?" if close else None
        raise InputError(f"{path}: key 'extends' = {parent!r}: no such scenario", hint=hint)
    pdata, pchain = _raw(ppath, (*seen, path.resolve()))
    pdata.pop("name", None)  # a name always comes from the file's own stem
    return _merge(pdata, data), (parent, *pchain)


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


# A crash scenario is what most callers load: its model is importable from here too.
__all__ = [
    "Broken",
    "Kind",
    "Scenario",
    "catalogue",
    "load",
    "locate",
    "names",
    "seeded",
    "survey",
]
