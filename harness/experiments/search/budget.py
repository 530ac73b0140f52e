"""``workload.budget``: a search that runs its selection in an order fixed by the seed
until a wall-clock budget is spent, and goes on from there when run again.

The order is ``acespace.shuffled``'s (an affine permutation of the index space, filtered
to the family and op classes), so it never depends on what was recorded: a resumed run walks
the same order, takes again the workloads already recorded (a prefix of it), and records
the next ones. Recording takes at most ``RECORD_SHARE`` of a budget: on this 2-core host
under TCG a workload records in ~1.3 s plus a boot per batch, and its 4-12 states take
~1 s each to check, so about a fifth of the time records and the rest checks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from harness.model import ace, acespace

RECORD_SHARE = 0.2


def order(w: Any, seed: int) -> Iterator[dict[str, Any]]:
    """The workloads of ``w`` (an ``AceSpec``) as ``ace.describe`` gives them, in the
    seed's order, ``w.limit`` of them at most."""
    keep = set(w.op_classes)
    taken = 0
    for i in acespace.shuffled(w.seq, seed, w.grammar, w.chosen_family()):
        if keep and not all(c.op_class in keep for c, _ in ace.decode(w.seq, i, w.grammar)):
            continue
        if w.limit and taken >= w.limit:
            return
        taken += 1
        yield ace.describe(w.seq, i, w.grammar)


def recorded_prefix(
    it: Iterator[dict[str, Any]], load: Callable[[dict[str, Any]], Any]
) -> tuple[list[dict[str, Any]], Iterator[dict[str, Any]]]:
    """The workloads at the head of ``it`` already recorded (``load`` not None), and the
    order from the first one that is not."""
    out: list[dict[str, Any]] = []
    for d in it:
        if load(d) is None:
            return out, itertools.chain([d], it)
        out.append(d)
    return out, iter(())
