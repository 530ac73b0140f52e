"""``scenario triage STATE-ID``: the smallest crash state that fails the way a stored
finding does, its writes explained.

The failing state is re-checked first, beside its base (one guest), so that every
candidate is compared with a symptom of today's lab and kernel, not with the stored
output; a state that no longer fails as stored is reported, not minimised. Then ddmin
(``ddmin.py``) takes the differing writes apart (``delta.py``), each round judged in one
go (``judge.py``). Nothing in the search is random, so the same state gives the same
minimal state.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness import paths
from harness.crashstate.statelog import file_name
from harness.errors import HarnessError
from harness.kernel.boot import booting
from harness.record import logwrites
from harness.replay.crashstates import CrashState
from harness.triage import absent, blocks, ddmin, delta, explain, symptom, target, workmin
from harness.triage.judge import Judge

DEFAULT_MAX_CANDIDATES = 200


@dataclass(frozen=True)
class Result:
    target: target.Target
    delta: delta.Delta
    original: symptom.Symptom  # the failing state, re-checked now
    base: symptom.Symptom  # its base (no differing write)
    search: ddmin.Minimal[int]
    state: CrashState  # the minimal state
    found: symptom.Symptom  # the minimal state's
    tally: symptom.Tally
    explanation: blocks.Explanation
    seconds: float
    # With no differing write needed: where each file found wrong first reaches the log
    # after the cut (entry, the mark before it).
    late: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    # The minimal workload (``workmin.py``); None with ``--no-workload``.
    workload: workmin.Workload | None = None

    @property
    def entries(self) -> list[int]:
        """The log entries of the minimal state's differing writes."""
        return self.delta.entries(self.search.items)

    @property
    def candidates(self) -> int:
        """Candidates judged: the failing state and its base, then ddmin's."""
        return 2 + self.search.tried


def triage(
    state_id: str,
    db: Path,
    *,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    workload: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> Result:
    """Minimise stored finding ``state_id`` (the module docstring); with ``workload``,
    its workload too (``workmin.py``), with the same budget.

    :raise InputError: no such state, not a finding, a run triage does not take.
    :raise HarnessError: the state no longer fails as stored (or the lab failed).
    """
    started = time.monotonic()
    t = target.load(state_id, db)
    name = file_name(t.state.id)
    with (
        booting(t.kernel),
        logwrites.open_log(t.log_path) as lg,
        # Named for the state: the run's own scratch (named for the run) may be in use.
        paths.fast_scratch(t.rdir / "triage" / f"scratch-{name}", 3 * t.size) as fast,
        Judge(t, lg, fast / "triage") as judge,
    ):
        d = delta.of(lg, t.state, t.start)
        progress(f"re-checking {t.state.id} and its base ({d.base_text})")
        original, base = judge([t.state, d.base], None)
        if original.outcome != t.verdict:
            raise HarnessError(
                f"crash state {t.state.id} does not fail as stored: stored {t.verdict}, "
                f"now {original.detail or original.outcome}",
                hint="a verdict that changes between checks is the lab's or the kernel's "
                "flakiness, not something triage can take apart",
            )

        def fails(subsets: list[tuple[int, ...]]) -> list[bool]:
            progress(f"ddmin: {len(subsets)} candidates (of {len(d.items)} differing writes)")
            found = judge([d.candidate(s) for s in subsets], original)
            return [f.same_way(original) for f in found]

        known: dict[tuple[int, ...], bool] = {(): base.same_way(original)}
        search = ddmin.ddmin(d.items, fails, max_candidates=max_candidates, known=known)
        state = d.candidate(search.items)
        found = judge.known(state)
        progress("explaining the minimal state's writes")
        entries = d.entries(search.items)
        x = explain.explain_writes(lg, state, t.size, str(t.fs.type), entries)
        late: dict[str, tuple[int, str | None]] = {}
        if not search.items:
            wrong = {p for _, p in found.findings}
            late = absent.first_writes(lg, str(t.fs.type), t.size, t.state.prefix, wrong)
    seconds = time.monotonic() - started
    ops = None
    if workload:
        with booting(t.kernel):
            ops = workmin.minimise(t, original, max_candidates=max_candidates, progress=progress)
    return Result(t, d, original, base, search, state, found, judge.tally, x, seconds, late, ops)
