"""Delta debugging (Zeller and Hildebrandt's ddmin) over a set of differing writes.

``ddmin(items, fails, max_candidates=...)`` returns a 1-minimal subset of ``items`` that
still fails: removing any single element makes it pass (unless the budget ran out
first). ``fails`` is asked a whole *round* at a time -- every subset and complement of
one granularity -- so a caller can judge a round in one guest boot; the answer is the one
sequential ddmin gives, because the round's first failing candidate in ddmin's own order
(subsets, then complements) is the one taken. Subsets keep the order of ``items``, and
nothing is random: the same input gives the same minimal subset.

``items`` itself is taken to fail (it is the failing state's set); the empty subset is
tried first, since a state whose base already fails needs none of its writes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


@dataclass(frozen=True)
class Minimal(Generic[T]):
    items: tuple[T, ...]  # the smallest failing subset found
    tried: int  # candidates handed to ``fails`` (each distinct subset once)
    rounds: int  # calls of ``fails``
    capped: bool  # the budget stopped the search: ``items`` may not be 1-minimal


def split(items: Sequence[T], n: int) -> list[tuple[T, ...]]:
    """``items`` in ``n`` contiguous parts whose sizes differ by at most one."""
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(tuple(items[start:end]))
        start = end
    return out


def ddmin(
    items: Sequence[T],
    fails: Callable[[list[tuple[T, ...]]], Sequence[bool]],
    *,
    max_candidates: int,
    known: Mapping[tuple[T, ...], bool] | None = None,
) -> Minimal[T]:
    """A 1-minimal failing subset of ``items`` (the module docstring), asking ``fails``
    at most ``max_candidates`` candidates in all; ``known``: subsets already judged (the
    base, say), never asked again."""
    judged: dict[tuple[T, ...], bool] = {**(known or {}), tuple(items): True}
    tried = rounds = 0

    def ask(candidates: list[tuple[T, ...]]) -> tuple[T, ...] | None:
        """The first failing candidate in order, asking only the unknown ones within the
        budget; None if none fails (or the budget cut the round before one did)."""
        nonlocal tried, rounds
        fresh = list(dict.fromkeys(c for c in candidates if c not in judged))
        fresh = fresh[: max(0, max_candidates - tried)]
        if fresh:
            rounds += 1
            tried += len(fresh)
            judged.update(zip(fresh, (bool(v) for v in fails(fresh)), strict=True))
        return next((c for c in candidates if judged.get(c)), None)

    def cut_short(candidates: list[tuple[T, ...]]) -> bool:
        return any(c not in judged for c in candidates)

    current = tuple(items)
    if ask([()]) is not None:
        return Minimal((), tried, rounds, False)
    if cut_short([()]):
        return Minimal(current, tried, rounds, True)
    n = 2
    while len(current) >= 2:
        parts = split(current, n)
        # With two parts each one's complement is the other: nothing more to ask.
        complements = [] if n == 2 else [_without(current, p) for p in parts]
        round_ = parts + complements
        found = ask(round_)
        if found is not None:
            n = 2 if found in parts else max(n - 1, 2)
            current = found
            continue
        if cut_short(round_):
            return Minimal(current, tried, rounds, True)
        if n >= len(current):
            break
        n = min(len(current), 2 * n)
    return Minimal(current, tried, rounds, False)


def _without(items: tuple[T, ...], part: tuple[T, ...]) -> tuple[T, ...]:
    drop = set(part)
    return tuple(x for x in items if x not in drop)
