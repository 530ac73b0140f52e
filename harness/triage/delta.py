"""A failing crash state as its base plus the writes it differs by, and the candidates
between the two (what ddmin searches).

Each generator's state has its own natural base, a state the durability model calls
complete, and its own differing set:

* a prefix state (``fua``, ``mark``, ``flush``, ``every``, ``percent``: nothing dropped
  or torn) *includes* the writes after the last FUA or mark cut before its own that has
  writes between it and the state; a candidate applies a subset of them;
* a ``reorder`` state *drops* writes from its full prefix; a candidate drops a subset;
* a ``torn`` state keeps some sector runs of one write on top of the prefix before it;
  a candidate keeps a subset of those runs (4 KiB units of a write of 8+ KiB, else
  sectors, as the generator tears them).

A candidate keeps the failing state's last mark and exactness, so it is judged by the
same oracle requirements: ddmin asks which writes make the difference, holding the
question fixed. (A candidate of an exact mark state still holds nothing logged after
the mark, so exactness stays true of it.)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from harness.errors import InputError
from harness.record.logwrites import FUA, Log
from harness.replay import crashstates
from harness.replay.crashstates import BLOCK_SECTORS, CrashState

Kind = Literal["includes", "drops", "tears"]


@dataclass(frozen=True)
class Delta:
    state: CrashState
    kind: Kind
    items: tuple[int, ...]  # entry indices; for "tears", first sectors of units of the entry
    base: CrashState  # the candidate with none of ``items``
    base_text: str  # the base in words
    unit: int = 1  # "tears": sectors per unit

    def candidate(self, subset: Sequence[int]) -> CrashState:
        """The state of the base plus ``subset`` of the differing items."""
        s = self.state
        keep = set(subset)
        if self.kind == "includes":
            return _derived(s, s.prefix, tuple(i for i in self.items if i not in keep), None, ())
        if self.kind == "drops":
            return _derived(s, s.prefix, tuple(sorted(keep)), None, ())
        return _derived(s, s.prefix, (), s.torn, _merge(p for p in self.pieces() if p[0] in keep))

    def pieces(self) -> list[tuple[int, int]]:
        """For "tears": the (first sector, sectors) of each unit the state keeps."""
        return [
            (x, min(self.unit, s + c - x))
            for s, c in self.state.torn_runs
            for x in range(s, s + c, self.unit)
        ]

    def entries(self, subset: Sequence[int]) -> list[int]:
        """The log entries ``subset`` stands for (the torn entry for sector units)."""
        if self.kind == "tears":
            return [self.state.torn] if subset and self.state.torn is not None else []
        return sorted(subset)

    def describe(self, subset: Sequence[int]) -> str:
        """What ``subset`` is, relative to the base, in words."""
        if self.kind == "tears":
            kept = sum(c for x, c in self.pieces() if x in set(subset))
            return f"{kept} sectors of entry {self.state.torn} kept"
        verb = "applied on top of" if self.kind == "includes" else "lost from"
        return f"{len(subset)} writes {verb} the base"


def _derived(
    s: CrashState, prefix: int, dropped: tuple[int, ...], torn: int | None, runs: crashstates.Runs
) -> CrashState:
    sid = crashstates.state_id(s.log_hash, prefix, dropped, torn, runs)
    # A search state's id is its workload's and its own (``seq1-000123/<id>``): a
    # candidate of it is named the same way, so the one that is the state is its id.
    head = s.id.rpartition("/")[0]
    sid = f"{head}/{sid}" if head else sid
    params = json.dumps({"of": s.id}, sort_keys=True, separators=(",", ":"))
    return replace(
        s,
        id=sid,
        prefix=prefix,
        dropped=dropped,
        torn=torn,
        torn_runs=runs,
        generator="triage",
        params=params,
    )


def of(lg: Log, state: CrashState, start: int) -> Delta:
    """The delta of ``state`` of log ``lg``, whose states begin after entry ``start``.

    :raise InputError: a state of a kind triage does not take apart (dropped and torn
        at once).
    """
    if state.dropped and state.torn is not None:
        raise InputError(f"crash state {state.id} both drops and tears writes: not triaged")
    if state.dropped:
        base = _derived(state, state.prefix, (), None, ())
        return Delta(state, "drops", state.dropped, base, f"its full prefix (entry {state.prefix})")
    if state.torn is not None:
        nr = lg.entries[state.torn].nr_sectors
        unit = BLOCK_SECTORS if nr >= 2 * BLOCK_SECTORS else 1
        base = _derived(state, state.prefix, (), state.torn, ())
        d = Delta(state, "tears", (), base, f"the prefix before torn entry {state.torn}", unit)
        return replace(d, items=tuple(x for x, _ in d.pieces()))
    cut = base_cut(lg, state.prefix, start)
    items = tuple(i for i in range(cut, state.prefix) if _changes(lg, i))
    base = _derived(state, state.prefix, items, None, ())
    return Delta(state, "includes", items, base, f"the cut at entry {cut}")


def base_cut(lg: Log, prefix: int, start: int) -> int:
    """The last FUA or mark cut before ``prefix`` with a write or discard between it and
    ``prefix`` (a cut with none holds the same image), not before ``start + 1``."""
    cuts = {i + 1 for i in lg.having(FUA)} | {i + 1 for i in lg.marks}
    changes = [i for i in range(start + 1, prefix) if _changes(lg, i)]
    if not changes:
        return min(prefix, start + 1)
    last_change = changes[-1]
    before = [c for c in cuts if start + 1 <= c <= last_change]
    return max(before, default=start + 1)


def _changes(lg: Log, i: int) -> bool:
    """Whether entry ``i`` changes the image (marks and bare flushes do not)."""
    e = lg.entries[i]
    return e.is_write or e.is_discard


def _merge(pieces: Iterable[tuple[int, int]]) -> crashstates.Runs:
    """Sector runs, contiguous pieces joined (as the generator writes them)."""
    out: list[tuple[int, int]] = []
    for x, c in sorted(pieces):
        if out and out[-1][0] + out[-1][1] == x:
            out[-1] = (out[-1][0], out[-1][1] + c)
        else:
            out.append((x, c))
    return tuple(out)
