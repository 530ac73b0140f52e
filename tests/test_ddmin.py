"""ddmin (harness/triage/ddmin.py) as a pure function over a predicate."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from harness.triage.ddmin import ddmin, split

Rounds = list[list[tuple[int, ...]]]


def needs(*wanted: int) -> tuple[Callable[[list[tuple[int, ...]]], list[bool]], Rounds]:
    """A round predicate: a subset fails when it holds every one of ``wanted``; it
    records every round it is asked."""
    rounds: Rounds = []

    def fails(cands: list[tuple[int, ...]]) -> list[bool]:
        rounds.append(cands)
        return [set(wanted) <= set(c) for c in cands]

    return fails, rounds


def one_minimal(found: tuple[int, ...], wanted: set[int]) -> bool:
    return all(not wanted <= set(found) - {x} for x in found)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 300])
def test_a_single_culprit_is_found_alone(n: int) -> None:
    fails, _ = needs(n // 2)
    m = ddmin(list(range(n)), fails, max_candidates=1000)
    assert m.items == (n // 2,) and not m.capped


def test_two_culprits_apart_are_both_kept_and_nothing_else() -> None:
    fails, _ = needs(3, 97)
    m = ddmin(list(range(100)), fails, max_candidates=1000)
    assert m.items == (3, 97)


def test_the_result_is_1_minimal_for_every_pair_of_eight() -> None:
    for pair in itertools.combinations(range(8), 2):
        fails, _ = needs(*pair)
        m = ddmin(list(range(8)), fails, max_candidates=1000)
        assert set(m.items) == set(pair) and one_minimal(m.items, set(pair))


def test_a_failure_with_no_culprit_is_the_empty_set_at_once() -> None:
    fails, rounds = needs()
    m = ddmin(list(range(50)), fails, max_candidates=10)
    assert m.items == () and rounds == [[()]] and m.tried == 1


def test_what_is_known_is_never_asked() -> None:
    fails, rounds = needs(5)
    m = ddmin(list(range(10)), fails, max_candidates=100, known={(): False})
    assert m.items == (5,)
    asked = [c for r in rounds for c in r]
    assert () not in asked and tuple(range(10)) not in asked
    assert len(asked) == len(set(asked)) == m.tried  # each distinct subset once


def test_deterministic_and_in_the_items_order() -> None:
    items = [9, 4, 7, 1, 8, 2]
    runs = []
    for _ in range(3):
        fails, rounds = needs(7, 2)
        runs.append((ddmin(items, fails, max_candidates=100), rounds))
    assert all(r == runs[0] for r in runs)
    assert runs[0][0].items == (7, 2)  # kept in the order given, not sorted


def test_the_budget_is_never_exceeded_and_says_it_stopped() -> None:
    fails, rounds = needs(3, 50, 97)
    m = ddmin(list(range(100)), fails, max_candidates=12)
    assert sum(len(r) for r in rounds) == m.tried <= 12
    assert m.capped
    assert {3, 50, 97} <= set(m.items)  # still a failing subset, only maybe not minimal
    full = ddmin(list(range(100)), needs(3, 50, 97)[0], max_candidates=10_000)
    assert full.items == (3, 50, 97) and not full.capped


def test_rounds_are_batches_of_subsets_then_complements() -> None:
    fails, rounds = needs(0, 5)
    ddmin(list(range(8)), fails, max_candidates=100, known={(): False})
    # Granularity 2 asks the two halves; neither fails, so granularity 4 asks its four
    # parts and their complements in one round.
    assert rounds[0] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert rounds[1][:4] == split(list(range(8)), 4)
    assert rounds[1][4] == (2, 3, 4, 5, 6, 7)


def test_split_is_contiguous_and_even() -> None:
    assert split(list(range(7)), 3) == [(0, 1, 2), (3, 4), (5, 6)]
