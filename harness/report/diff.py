"""Compare two runs state by state, and check a run against a baseline of expected outcomes.

A state id names the same cut of the same workload in every run of a scenario with the
same parameters and seed, so ``diff`` matches states by id. Typical use: the same
scenario under two guest kernels.

A baseline is what a nightly job checks against, as TOML (or JSON of the same shape)::

    # scenario -> the outcomes it may have, and at most how many states of each
    [scenarios.ext4-ordered-fsync]
    allowed = ["consistent"]

    [scenarios.ext2-fsync]
    allowed = ["consistent", "repaired"]   # ext2 has no journal: fsck repairs
    max = { repaired = 40 }

A run *regresses* when one of its states has an outcome not in ``allowed``, when an
outcome's count exceeds its ``max``, or when the run did not finish. A scenario missing
from the baseline is reported, and is a regression only with ``strict``.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.outcome import Outcome
from harness.store.db import RunRow, RunStatus, Store


@dataclass(frozen=True)
class StateChange:
    state_id: str
    before: str | None  # None: the state is not in (or not checked in) run A
    after: str | None
    seconds_before: float | None  # total recovery seconds
    seconds_after: float | None

    @property
    def worse(self) -> bool:
        return _severity(self.after) > _severity(self.before)

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "worse": self.worse}


@dataclass(frozen=True)
class PhaseDelta:
    phase: str
    n: int  # states with this phase in both runs
    mean_before: float
    mean_after: float

    @property
    def delta(self) -> float:
        return self.mean_after - self.mean_before

    @property
    def ratio(self) -> float | None:
        """B's mean over A's: what compares across kernels and hosts of other speeds."""
        return self.mean_after / self.mean_before if self.mean_before else None


@dataclass(frozen=True)
class RunDiff:
    a: RunRow
    b: RunRow
    matched: int
    changes: Sequence[StateChange]  # outcome changed (including appearing / vanishing)
    phases: Sequence[PhaseDelta]
    notes: Sequence[str] = field(default_factory=list)
    # outcome -> (count in A, count in B), from each run's account; "(expected)" marks
    # the outcomes its kind's rule expects. What compares across kernels, whose
    # recordings differ and so share few state ids.
    outcomes: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def worse(self) -> list[StateChange]:
        return [c for c in self.changes if c.worse and c.before is not None]

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a.id,
            "b": self.b.id,
            "matched": self.matched,
            "changes": [c.to_json() for c in self.changes],
            "phases": [{**p.__dict__, "delta": p.delta, "ratio": p.ratio} for p in self.phases],
            "notes": list(self.notes),
            "outcomes": {o: list(n) for o, n in self.outcomes.items()},
        }


def _severity(outcome: str | None) -> int:
    if outcome is None:
        return -1
    try:
        return Outcome(outcome).severity
    except ValueError:
        return 99


def diff_runs(store: Store, run_a: str, run_b: str) -> RunDiff:
    """States of two runs matched by id: outcome changes and recovery-time deltas.

    :raise InputError: an unknown or ambiguous run id.
    """
    a, b = store.run(run_a), store.run(run_b)
    sa, sb = store.state_results(a.id), store.state_results(b.id)
    notes = []
    if a.scenario != b.scenario:
        notes.append(f"different scenarios: {a.scenario} vs {b.scenario}")
    if a.seed != b.seed:
        notes.append(f"different seeds ({a.seed} vs {b.seed}): few states will match")
    for label, k in (("guest kernel", "guest_kernel"), ("accelerator", "accelerator")):
        va, vb = getattr(a, k), getattr(b, k)
        if va != vb:
            notes.append(f"{label}: {va} -> {vb}")
    # The same release can be two builds (a mutant, a patched module, a user's tree).
    ka, kb = a.tool_versions.get("kernel"), b.tool_versions.get("kernel")
    if ka != kb and a.guest_kernel == b.guest_kernel:
        notes.append(f"kernel build: {ka or '-'} -> {kb or '-'}")
    changes = []
    for sid in sorted(set(sa) | set(sb)):
        oa, ta = sa.get(sid, (None, {}))
        ob, tb = sb.get(sid, (None, {}))
        if oa != ob:
            changes.append(
                StateChange(
                    sid, oa, ob, sum(ta.values()) if ta else None, sum(tb.values()) if tb else None
                )
            )
    both = set(sa) & set(sb)
    per: dict[str, tuple[list[float], list[float]]] = {}
    for sid in both:
        ta, tb = sa[sid][1], sb[sid][1]
        for phase in ta.keys() & tb.keys():
            pa, pb = per.setdefault(phase, ([], []))
            pa.append(ta[phase])
            pb.append(tb[phase])
    phases = [
        PhaseDelta(p, len(va), sum(va) / len(va), sum(vb) / len(vb))
        for p, (va, vb) in sorted(per.items())
    ]
    matched = sum(1 for sid in both if sa[sid][0] is not None and sb[sid][0] is not None)
    if a.guest_kernel != b.guest_kernel and matched < max(len(sa), len(sb)):
        notes.append(
            "another kernel writes another log, so states are matched by id only where the "
            "recordings agree: compare the outcome counts"
        )
    return RunDiff(a, b, matched, changes, phases, notes, _outcomes(store, a.id, b.id))


def _outcomes(store: Store, run_a: str, run_b: str) -> dict[str, tuple[int, int]]:
    ca, cb = (_counts(store.account(r)[0]) for r in (run_a, run_b))
    return {o: (ca.get(o, 0), cb.get(o, 0)) for o in sorted({*ca, *cb})}


def _counts(account: Any) -> dict[str, int]:
    out = dict(account.counts)
    out.update({f"{o} (expected)": n for o, n in account.expected.items()})
    return out


# --- baselines ----------------------------------------------------------------------


@dataclass(frozen=True)
class Expectation:
    allowed: frozenset[str]
    max: Mapping[str, int]


@dataclass(frozen=True)
class Baseline:
    path: Path
    scenarios: Mapping[str, Expectation]


def load_baseline(path: Path) -> Baseline:
    """Read a baseline file (TOML, or JSON when it ends in .json).

    :raise InputError: unreadable, not TOML/JSON, or a bad key or outcome (named).
    """
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"{path}: cannot read baseline: {e.strerror}") from None
    try:
        data: Any = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise InputError(f"{path}: not a valid baseline file: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("scenarios"), dict):
        raise InputError(
            f"{path}: expected a [scenarios.NAME] table per scenario",
            hint='e.g. [scenarios.ext4-ordered-fsync]\\nallowed = ["consistent"]',
        )
    if extra := set(data) - {"scenarios", "description"}:
        raise InputError(f"{path}: unknown key(s) {', '.join(sorted(extra))}")
    valid = {str(o) for o in Outcome}
    out: dict[str, Expectation] = {}
    for name, spec in data["scenarios"].items():
        where = f"{path}: scenarios.{name}"
        if not isinstance(spec, dict):
            raise InputError(f"{where}: expected a table with 'allowed' (and 'max')")
        if extra := set(spec) - {"allowed", "max"}:
            raise InputError(f"{where}: unknown key(s) {', '.join(sorted(extra))}")
        allowed = spec.get("allowed", ["consistent"])
        limits = spec.get("max", {})
        if not isinstance(allowed, list) or not isinstance(limits, dict):
            raise InputError(f"{where}: 'allowed' is a list of outcomes, 'max' a table")
        for o in [*allowed, *limits]:
            if o not in valid:
                raise InputError(
                    f"{where}: unknown outcome {o!r}", hint="outcomes: " + ", ".join(valid)
                )
        for o, n in limits.items():
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise InputError(f"{where}.max.{o} = {n!r}: expected a count >= 0")
        out[str(name)] = Expectation(frozenset(allowed) | frozenset(limits), dict(limits))
    return Baseline(path, out)


@dataclass(frozen=True)
class CheckReport:
    run: RunRow
    regressions: Sequence[str]
    notes: Sequence[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run.id,
            "scenario": self.run.scenario,
            "regressed": bool(self.regressions),
            "regressions": list(self.regressions),
            "notes": list(self.notes),
            "outcome_counts": dict(self.run.outcome_counts),
        }


def check_run(
    store: Store, run_id: str, baseline: Baseline, *, strict: bool = False
) -> CheckReport:
    """Whether ``run_id`` stays within ``baseline``; see the module docstring.

    :raise InputError: an unknown or ambiguous run id.
    """
    run = store.run(run_id)
    regressions: list[str] = []
    notes: list[str] = []
    if run.status is not RunStatus.DONE:
        regressions.append(f"run did not finish: status {run.status}")
    exp = baseline.scenarios.get(run.scenario)
    if exp is None:
        msg = f"scenario {run.scenario} is not in the baseline {baseline.path}"
        (regressions if strict else notes).append(msg)
        return CheckReport(run, regressions, notes)
    for outcome, n in run.outcome_counts.items():
        if outcome not in exp.allowed:
            states = store.states_with_outcome(run.id, outcome, limit=5)
            regressions.append(
                f"{n} state(s) {outcome}, not allowed (allowed: {', '.join(sorted(exp.allowed))})"
                f"; e.g. {', '.join(states)}"
            )
        elif outcome in exp.max and n > exp.max[outcome]:
            regressions.append(
                f"{n} state(s) {outcome}, baseline allows at most {exp.max[outcome]}"
            )
    if not run.outcome_counts:
        notes.append("no state was checked")
    return CheckReport(run, regressions, notes)
