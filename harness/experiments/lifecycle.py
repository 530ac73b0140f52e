"""One run lifecycle for every experiment kind.

The lifecycle owns the run: the run row (``running`` -> ``done`` / ``failed`` /
``interrupted``), resuming an unfinished run of the same scenario, parameters, seed and
guest image, the commit of each item the moment its result is known, the stored summary,
the exit status, the run log and the stall budget. An experiment kind supplies only its
steps, as a subclass of :class:`Experiment` registered by name::

    @lifecycle.register("crash")
    class CrashReplay(lifecycle.Experiment):
        run_kind = RunKind.CRASH
        def prepare(self) -> None: ...          # record the workload, set the run's env
        def items(self) -> Sequence[Item]: ...  # what is checked, each with an ``id``
        def check(self, todo) -> Iterator[tuple[Item, Any]]: ...  # results as known
        def commit(self, item, result) -> None: ...               # one store transaction

``scenario run`` and ``scenario campaign run`` find the kind by the scenario's
``experiment_kind``; adding a kind is one module in ``harness/experiments/`` (imported
by ``harness/experiments/__init__.py``) plus its scenarios.

Exit status (README): 0 no finding, 1 a finding, 3 a harness failure, which says nothing
about the filesystem; a scenario that declares ``expect`` (a known-answer control) exits 0
when its answer is the expected one and 1 when it is not.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar, Protocol

from harness import outcome, paths
from harness.errors import EXIT_FINDING, EXIT_HARNESS, EXIT_OK, InputError
from harness.image.build import Image, require_image
from harness.store.db import RunEnv, RunKind, RunStatus, Store

log = logging.getLogger("crashlab.lifecycle")

Progress = Callable[[str, int, int], None]  # (what, done, total)


def no_progress(what: str, done: int, total: int) -> None:
    return None


class Item(Protocol):
    @property
    def id(self) -> str: ...


class Stalled(BaseException):
    """A run went past its stall budget: a hang somewhere, never a finding.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` (or a
    checker turning a ``HarnessError`` into a per-state outcome) swallows it on its way
    out; the run records itself as failed and a campaign counts a timeout.
    """


@dataclass
class Run:
    """What an experiment kind is given: its run, already begun or resumed."""

    scenario: Any
    store: Store
    db: Path
    run_id: str
    seed: int
    image: Image
    resumed: bool
    progress: Progress

    @property
    def dir(self) -> Path:
        return run_dir(self.run_id)


def run_dir(run_id: str) -> Path:
    """A run's working directory (recorded logs, batches), kept for a resume."""
    return paths.work_dir() / "runs" / run_id


class Experiment(ABC):
    """The steps of one experiment kind; see the module docstring."""

    run_kind: ClassVar[RunKind]

    def __init__(self, run: Run):
        self.run = run
        self.sc = run.scenario

    @classmethod  # noqa: B027 -- optional, not abstract
    def preflight(cls, sc: Any) -> None:
        """Bad input only the host can tell (free space, what its tools accept), checked
        before the run begins, so before any guest boots.

        :raise InputError: naming the file, the key and the value.
        """

    def close(self) -> None:  # noqa: B027 -- optional, not abstract
        """Release what ``prepare`` opened; called however the run ends."""

    @abstractmethod
    def prepare(self) -> None:
        """Everything before the first item: record, build states, set the run's env."""

    @abstractmethod
    def items(self) -> Sequence[Item]:
        """Every item of the run, done earlier or not, in the order they are checked."""

    def done(self) -> set[str]:
        """Ids of the items that already have a result (skipped on resume)."""
        return self.run.store.done_state_ids(self.run.run_id)

    @abstractmethod
    def check(self, todo: Sequence[Item]) -> Iterator[tuple[Item, Any]]:
        """Yield each item's result the moment it is known."""

    @abstractmethod
    def commit(self, item: Item, result: Any) -> None:
        """Store one item's result (one transaction)."""

    def counts(self) -> dict[str, int]:
        """Outcome counts of every item of the run, earlier ones included, from the store;
        only what can be a finding (a kind may keep modelled-fault outcomes out)."""
        return self.run.store.outcome_counts(self.run.run_id)

    def summary(self) -> dict[str, Any]:
        """What the kind adds to the stored summary."""
        return {}

    def exit_status(self, counts: Mapping[str, int]) -> int:
        return outcome.exit_status(outcome.Outcome(o) for o, n in counts.items() if n)


class Observed(Experiment):
    """A kind whose items are rows of the store's ``observations`` table (no table of its
    own): an item is done when its row exists, and the counts are the rows' outcomes."""

    def done(self) -> set[str]:
        return {o["item"] for o in self.run.store.observations(self.run.run_id)}

    def counted(self, observation: Mapping[str, Any]) -> bool:
        """Whether an item's outcome counts (a kind may keep an expected result out)."""
        return True

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.run.store.observations(self.run.run_id):
            if self.counted(o):
                out[o["outcome"]] = out.get(o["outcome"], 0) + 1
        return out


REGISTRY: dict[str, type[Experiment]] = {}


def register(name: str) -> Callable[[type[Experiment]], type[Experiment]]:
    """Class decorator: the experiment kind for scenarios whose ``experiment_kind`` is
    ``name``."""

    def add(cls: type[Experiment]) -> type[Experiment]:
        REGISTRY[name] = cls
        return cls

    return add


def kind_of(sc: Any) -> type[Experiment]:
    name = str(sc.experiment_kind)
    if name not in REGISTRY:
        raise InputError(
            f"{sc.name}: no experiment kind {name!r}",
            hint="known kinds: " + ", ".join(sorted(REGISTRY)),
        )
    return REGISTRY[name]


@dataclass
class Report:
    run_id: str
    db: Path
    scenario: Any
    experiment: Experiment
    resumed: bool
    items: int
    earlier: int  # items that had a result before this process started
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    status: int = EXIT_OK
    expect_failed: str | None = None  # a control's wrong answer, said in words
    not_resumed: str | None = None  # why an unfinished run was not taken up
    # What was stored as the run's summary (the kind's own part included), for the
    # end-of-run report: the store is closed by the time it is printed.
    summary: dict[str, Any] = field(default_factory=dict)


def execute(
    sc: Any,
    *,
    db: Path,
    fresh: bool = False,
    budget: float | None = None,
    progress: Progress = no_progress,
) -> Report:
    """Run scenario ``sc`` to the end (or resume it); every result is in ``db`` as soon
    as it is known.

    :raise InputError: bad input found late (an unknown kind).
    :raise HarnessError: the lab failed (the run is marked failed, what was committed
        stays); ``Stalled`` past ``budget`` seconds.
    """
    cls = kind_of(sc)
    cls.preflight(sc)
    started = time.monotonic()
    seed = sc.seed  # the one seed: --seed and a campaign's seeds are `seed=N` overrides
    img = require_image()
    params = sc.resolved()
    with Store.open(db) as st:
        run_id, resumed, not_resumed = _begin(st, sc, cls, params, seed, img, fresh)
        run = Run(sc, st, db, run_id, seed, img, resumed, progress)
        exp = cls(run)
        report = Report(run_id, db, sc, exp, resumed, 0, 0, not_resumed=not_resumed)
        try:
            with stall_budget(budget), contextlib.closing(exp):
                _steps(exp, report)
        except BaseException as e:
            status = RunStatus.INTERRUPTED if isinstance(e, KeyboardInterrupt) else RunStatus.FAILED
            st.finish_run(run_id, status, {"error": str(e)[:500], "outcome_counts": exp.counts()})
            raise
        report.seconds = time.monotonic() - started
        report.counts = exp.counts()
        report.status = exp.exit_status(report.counts)
        report.expect_failed = expectation_failed(getattr(sc, "expect", None), report)
        if report.expect_failed is not None:
            report.status = EXIT_FINDING
        elif getattr(sc, "expect", None) is not None and report.status == EXIT_FINDING:
            report.status = EXIT_OK  # a positive control that found what it must
        report.summary = {
            "outcome_counts": report.counts,
            "items": report.items,
            "seconds": round(report.seconds, 2),
            **({"expect": sc.expect} if getattr(sc, "expect", None) else {}),
            **({"control_failed": report.expect_failed} if report.expect_failed else {}),
            **exp.summary(),
        }
        st.finish_run(run_id, RunStatus.DONE, report.summary)
    return report


def _begin(
    st: Store,
    sc: Any,
    cls: type[Experiment],
    params: Mapping[str, Any],
    seed: int,
    img: Image,
    fresh: bool,
) -> tuple[str, bool, str | None]:
    """The run to use: an unfinished one of the same scenario, parameters, seed and
    guest image (verdicts of two kernels never share a run), else a new one."""
    not_resumed = None
    if not fresh:
        found = st.find_resumable_run(sc.name, params, seed)
        if found is not None:
            row = st.run(found)
            if row.image_hash in (None, img.hash):
                st.resume_run(found)
                return found, True, None
            not_resumed = (
                f"run {found} of this scenario is unfinished but used guest image "
                f"{row.image_hash}, not {img.hash}: starting a new run"
            )
    run_id = st.begin_run(
        sc.name, cls.run_kind, params, seed, fs=_fs_of(sc), env=RunEnv(image_hash=img.hash)
    )
    return run_id, False, not_resumed


def _fs_of(sc: Any) -> str | None:
    fs = getattr(sc, "fs", None)
    if fs is None:
        return "zfs" if getattr(sc, "pool", None) is not None else None
    return str(getattr(fs, "type", fs))


def _steps(exp: Experiment, report: Report) -> None:
    run = exp.run
    exp.prepare()
    items = list(exp.items())
    done = exp.done()
    todo = [it for it in items if it.id not in done]
    report.items, report.earlier = len(items), len(items) - len(todo)
    finished = report.earlier
    run.progress("checking", finished, len(items))
    for item, result in exp.check(todo):
        exp.commit(item, result)
        finished += 1
        run.progress("checking", finished, len(items))


def expectation_failed(expect: str | None, report: Report) -> str | None:
    """For a known-answer control: what went wrong, or None when the answer is right (or
    the scenario expects nothing). A harness failure is never a control's answer."""
    if expect is None or report.status == EXIT_HARNESS:
        return None
    findings = sum(n for o, n in report.counts.items() if outcome.is_finding(outcome.Outcome(o)))
    if expect == "findings" and findings == 0:
        return "control failed: expected findings, got none"
    if expect == "clean" and findings:
        return f"control failed: expected clean, got {findings} finding(s)"
    return None


@contextmanager
def stall_budget(seconds: float | None) -> Iterator[None]:
    """Raise ``Stalled`` in the main thread if the block runs longer than ``seconds``."""
    if seconds is None:
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise Stalled(f"stalled past its budget of {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
