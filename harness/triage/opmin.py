"""The minimal workload's pure logic: which ops ddmin may take out of a failing state's
workload, what each candidate keeps, and which candidates are workloads at all.

A failing state is judged at its *oracle point*: its last mark, the mark of one
persistence op P of the workload (``crashlab:sync:N``), or the workload's end (its final
sync, ``crashlab:umount``). A candidate keeps P, and only ops before it are ddmin's to
take out: the ops after P cannot change what the oracle requires at P, and without P the
candidate would be asked another question (the requirement of an earlier mark). A
candidate is judged at the mark *its* P leaves (the same op, another number when
persistence ops before it are gone), by states of the failing state's kind there
(``workmin.py``). Ops are named by their index in the run's workload, so a candidate is a
sorted tuple of indices and nothing here is random.

Which workloads: the op generator's (``harness/guest/opgen.py``: its seed draws the
same ops again, on the host and in the guest) and ACE's, a search run's workload
(``harness/guest/ace.py``: its seq and index, base file set included). Others are *not
minimised*, with a reason (:class:`NotMinimised`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.config.crash import FsSpec
from harness.model import ace, opfile
from harness.model.ops import PERSIST_OPS, parent
from harness.model.oracle import AFTER_FINAL, Model
from harness.model.oracle.doc import OpEntry, OracleDoc
from harness.triage import ddmin

Subset = tuple[int, ...]


class NotMinimised(Exception):
    """The workload cannot be minimised; the message says why (the report shows it)."""


@dataclass(frozen=True)
class Plan:
    source: dict[str, Any]  # ``ace.source_ops``'s argument: the workload's ops again
    ops: tuple[OpEntry, ...]  # the oracle's op list, the final sync excepted
    point: int | None  # P, the index of the oracle point's op; None: the workload's end
    mark: str  # the failing state's mark (its oracle point)

    @property
    def items(self) -> Subset:
        """The ops ddmin may take out: those before P (every op, at the end)."""
        return tuple(range(len(self.ops) if self.point is None else self.point))

    def keep(self, subset: Sequence[int]) -> Subset:
        """A candidate's ops: ``subset`` of the items, and P."""
        return (*subset, *(() if self.point is None else (self.point,)))

    def point_mark(self, oracle: OracleDoc) -> str | None:
        """The mark a candidate's recording (its ``oracle``) leaves at the oracle point:
        its P's mark, its final sync's, or the failing state's own (``umount``)."""
        if self.point is None:
            return self.mark if self.mark in AFTER_FINAL else oracle.final_mark
        ops = oracle.workload_ops()
        return ops[-1].mark if ops else None


def plan(
    params: Mapping[str, Any],
    oracle: OracleDoc,
    mark: str | None,
    seed: int | None,
    workload: Mapping[str, Any] | None = None,
) -> Plan:
    """The plan for a failing state judged at ``mark`` of a run with ``params`` and
    ``oracle``; ``workload``: a search run's workload the state's log recorded (its
    ``seq`` and ``index``), else the run's own op workload.

    :raise NotMinimised: a workload of another kind, one the generator no longer draws
        as recorded, or a state cut before the workload's first persistence point.
    """
    w = params.get("workload") or {}
    kind = "ace" if workload else w.get("type", "ops")
    if kind not in ("ops", "ace", "file") or not oracle.ops:
        raise NotMinimised(
            f"a {kind} workload: only the op generator's, ACE's and workload files' ops are "
            "re-recorded op by op (a pattern's ops are one program; fio and fsstress keep "
            "no op list)"
        )
    ops = oracle.workload_ops()
    source = _source(params, oracle, seed, workload)
    drawn = [op.describe() for op in ace.source_ops(source)]
    if drawn != [o.described() for o in ops]:
        raise NotMinimised(
            f"the {_DRAWN_BY[source['kind']]} no longer draws the run's ops (it changed "
            "since the run): a subset of them cannot be re-recorded"
        )
    if mark in AFTER_FINAL or (mark is not None and mark == oracle.final_mark):
        return Plan(source, ops, None, mark)
    point = next((i for i, o in enumerate(ops) if mark and o.mark == mark), None)
    if point is None:
        raise NotMinimised(
            f"the state is cut at mark {mark!r}, before the workload's first persistence "
            "point: no op's promise is judged there"
        )
    return Plan(source, ops, point, str(mark))


_DRAWN_BY = {"ace": "ACE grammar", "opgen": "op generator", "file": "workload file's parser"}


def _source(
    params: Mapping[str, Any],
    oracle: OracleDoc,
    seed: int | None,
    workload: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """``ace.source_ops``'s argument that draws the workload's ops again."""
    if workload:
        # A search records with names fsync'd only where the filesystem journals them
        # (crashstate/workloads.py): the model that closes a subset must say the same.
        journaled = FsSpec.model_validate(params["fs"]).journaled
        return {
            "kind": "ace",
            "seq": int(workload["seq"]),
            "index": int(workload["index"]),
            **({"grammar": workload["grammar"]} if workload.get("grammar") else {}),
            "fsync_names": journaled,
        }
    w = params.get("workload") or {}
    if w.get("type") == "file":  # a workload file's ops, as the run parsed them
        fs = str(params["fs"]["type"])
        return {"kind": "file", "ops": opfile.parse(w["text"], fs), "fsync_names": w["fsync_names"]}
    return {
        "kind": "opgen",
        **dataclasses.asdict(oracle.drawn(w, seed)),
        "extended": bool(w.get("extended")),
        "bug_ops": bool(w.get("bug_ops")),
        "fsync_names": oracle.fsync_names,
    }


def missing(
    source_ops: Sequence[Any], keep: Sequence[int], fsync_names: bool
) -> tuple[int, str] | None:
    """The first of the ops ``keep`` of ``source_ops`` that is no workload in the
    oracle's model -- its file, or a new name's directory, is not there -- and the name
    it lacks ("" when the model refuses it otherwise); None when they are a workload."""
    model = Model(fsync_names)
    for i in keep:
        op = source_ops[i]
        new = ([op.dst] if op.kind in ("rename", "link") else []) + (
            [op.path] if op.kind in ("create", "mkdir") else []
        )
        need = [parent(n) for n in new]
        if op.kind not in ("create", "mkdir", "sync"):
            need.insert(0, op.path)
        lack = next((n for n in need if n not in model.files and n not in model.dirs), None)
        if lack is not None:
            return i, lack
        try:
            model.apply(op)
        except (KeyError, ValueError, IndexError):
            return i, ""
    return None


def valid(source_ops: Sequence[Any], keep: Sequence[int], fsync_names: bool) -> bool:
    """Whether the ops ``keep`` of ``source_ops`` are a workload (``missing``)."""
    return missing(source_ops, keep, fsync_names) is None


def closed(source_ops: Sequence[Any], keep: Sequence[int], fsync_names: bool) -> Subset | None:
    """``keep`` with the ops that make the names its ops need: for each name an op
    lacks, the last op before it that makes the name (a create, mkdir, link or rename),
    until they are a workload; None when a name has no maker. ddmin's subsets are closed
    so before they are recorded: a subset that leaves out a file's create still asks
    about the ops it keeps, instead of being no workload at all (ops depend on each
    other, so most coarse subsets would be)."""
    out = set(keep)
    while (m := missing(source_ops, sorted(out), fsync_names)) is not None:
        i, name = m
        maker = next((j for j in range(i - 1, -1, -1) if _makes(source_ops[j], name)), None)
        if not name or maker is None or maker in out:
            return None
        out.add(maker)
    return tuple(sorted(out))


def _makes(op: Any, name: str) -> bool:
    if op.kind in ("create", "mkdir"):
        return bool(op.path == name)
    if op.kind in ("rename", "link"):
        return bool(op.dst == name or (op.kind == "rename" and name.startswith(op.dst + "/")))
    return False


def persistence_ops(p: Plan, keep: Sequence[int]) -> int:
    """How many persistence ops a candidate keeps (each one a mark)."""
    return sum(1 for i in keep if p.ops[i].op in PERSIST_OPS)


Judged = Callable[[list[Subset]], Sequence[bool]]


def minimise(
    p: Plan,
    fails: Judged,
    *,
    max_candidates: int,
    known: Mapping[Subset, bool] | None = None,
    is_valid: Callable[[Subset], bool] = lambda _: True,
) -> ddmin.Minimal[int]:
    """ddmin over ``p``'s items; ``fails`` judges a round's *valid* candidates (subsets
    of the items, without P) together, an invalid one fails not (it is no workload)."""

    def round_(subsets: list[Subset]) -> list[bool]:
        asked = [s for s in subsets if is_valid(s)]
        answers = dict(zip(asked, fails(asked) if asked else [], strict=True))
        return [answers.get(s, False) for s in subsets]

    return ddmin.ddmin(p.items, round_, max_candidates=max_candidates, known=known)
