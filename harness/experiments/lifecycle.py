"""One run lifecycle for every experiment kind.

The lifecycle owns the run: the run row (``running`` -> ``done`` / ``failed`` /
``interrupted``), resuming an unfinished run of the same scenario, parameters, seed and
guest image, the commit of each item the moment its result is known, the stored summary,
the exit status, the run log and the stall budget. An experiment kind supplies only its
steps, as a subclass of :class:`Experiment` named by its kind's record
(``harness/experiments/registry.py``)::

    class CrashReplay(lifecycle.Experiment):
        def prepare(self) -> None: ...          # record the workload, set the run's env
        def items(self) -> Sequence[Item]: ...  # what is checked, each with an ``id``
        def check(self, todo) -> Iterator[tuple[Item, Any]]: ...  # results as known
        def commit(self, item, result) -> None: ...               # one store transaction

``scenario run`` and ``scenario campaign run`` find the kind by the scenario's ``kind``
and ``experiment_kind``; adding a kind is one folder in ``harness/experiments/`` plus its
scenarios (``docs/layout.md``).

Exit status (README): 0 no finding, 1 a finding, 3 a harness failure, which says nothing
about the filesystem; a scenario that declares ``expect`` (a known-answer control) exits 0
when its answer is the expected one and 1 when it is not.
"""

from __future__ import annotations

import contextlib
import logging
import platform
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from harness import filesystems, outcome, waivers
from harness.config.crash import FsSpec
from harness.errors import HarnessError, NotRun
from harness.experiments import registry
from harness.image.build import Image, require_image
from harness.kernel.boot import booting
from harness.kernel.store import Kernel, describe
from harness.paths import run_dir
from harness.store.db import Accelerator, RunEnv, RunStatus, Store
from harness.store.model import ItemOutcome
from harness.vm import backend

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


class Experiment(ABC):
    """The steps of one experiment kind; see the module docstring."""

    def __init__(self, run: Run):
        self.run = run
        self.sc = run.scenario

    @classmethod
    def needs_guest(cls, sc: Any) -> bool:
        """Whether the run boots a guest: only then is the accelerator probed and QEMU
        asked for (a host-only run works on a host without QEMU)."""
        return True

    @classmethod  # noqa: B027 -- optional, not abstract
    def preflight(cls, sc: Any) -> None:
        """Bad input only the host can tell (free space, what its tools accept), checked
        before the run begins, so before any guest boots.

        :raise InputError: naming the file, the key and the value.
        """

    def caveat(self) -> str | None:
        """What "no finding" does not cover in this run, said after it (optional)."""
        return None

    def close(self) -> None:  # noqa: B027 -- optional, not abstract
        """Release what ``prepare`` opened; called however the run ends."""

    @abstractmethod
    def prepare(self) -> None:
        """Everything before the first item: record, build states, set the run's env."""

    @abstractmethod
    def items(self) -> Sequence[Item]:
        """Every item of the run, done earlier or not, in the order they are checked."""

    # Set by a kind that stopped at its own wall-clock budget with work left: the run ends
    # interrupted, so running the command again takes it up where it stopped.
    more_to_do = False

    # Whether done() leaves out items with a harness outcome (so a resume redoes them);
    # false for a kind whose rows cannot be replaced (ZFS scans are appended).
    retries_harness_items = True

    def done(self) -> set[str]:
        """Ids of the items that already have a result (skipped on resume)."""
        return self.run.store.done_state_ids(self.run.run_id)

    @abstractmethod
    def check(self, todo: Sequence[Item]) -> Iterator[tuple[Item, Any]]:
        """Yield each item's result the moment it is known."""

    @abstractmethod
    def commit(self, item: Item, result: Any) -> None:
        """Store one item's result (one transaction)."""

    def expected(self, item: ItemOutcome) -> bool:
        """The kind's one counting rule: whether an item's outcome is what the
        filesystem's design makes normal (``repaired`` without a journal, ``data_loss``
        past a pool's parity, a modelled lying disk), reported but no finding. Reads only
        what the store holds (the scenario, the item's own stored facts), so any report
        can apply it again."""
        return False

    def waiver(self, item: ItemOutcome) -> str | None:
        """The configuration option that gave up the promise the item's outcome breaks
        (harness/waivers.py: barrier=0 on a volatile cache ...), or None. Any kind whose
        scenario mounts a filesystem with options has it; the rest mount none."""
        fs = getattr(self.sc, "fs", None)
        if not isinstance(fs, FsSpec):
            return None
        found = waivers.waiver_of(str(fs.type), fs.all_mount_options(), item.outcome)
        return found.name if found else None

    def finish(self) -> None:  # noqa: B027 -- optional, not abstract
        """After every item is committed (not when the run fails or is interrupted):
        let go of what only an unjudged item would need."""

    def summary(self) -> dict[str, Any]:
        """What the kind adds to the stored summary."""
        return {}


class Observed(Experiment):
    """A kind whose items are rows of the store's ``observations`` table (no table of its
    own): an item is done when its row exists."""

    def done(self) -> set[str]:
        # An item the lab failed (timeout, harness_error) is redone by a resume; its row
        # is replaced then (record_observation).
        return {
            o["item"]
            for o in self.run.store.observations(self.run.run_id)
            if o["outcome"] is None or not outcome.is_harness(outcome.Outcome(o["outcome"]))
        }


@dataclass
class Report:
    run_id: str
    db: Path
    scenario: Any
    experiment: Experiment
    resumed: bool
    items: int
    earlier: int  # items that had a result before this process started
    account: outcome.Account = field(default_factory=outcome.Account)
    seconds: float = 0.0
    not_resumed: str | None = None  # why an unfinished run was not taken up
    final: RunStatus = RunStatus.RUNNING  # the status the run was left in
    # What was stored as the run's summary (the kind's own part included), for the
    # end-of-run report: the store is closed by the time it is printed.
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def counts(self) -> Mapping[str, int]:
        return self.account.counts

    @property
    def status(self) -> int:
        return self.account.status


def execute(
    sc: Any,
    *,
    db: Path,
    fresh: bool = False,
    only: str | None = None,
    began: Callable[[str], None] | None = None,
    budget: float | None = None,
    progress: Progress = no_progress,
) -> Report:
    """Run scenario ``sc`` to the end (or resume it); every result is in ``db`` as soon
    as it is known. ``fresh``: a new run; ``only``: resume no unfinished run but this
    one (a campaign element's own: two campaigns of one store never share a run);
    ``began`` is told the run's id before its first step.

    :raise InputError: bad input found late (an unknown kind, a kernel without an option
        the scenario needs).
    :raise NotRun: the chosen kernel has no build of a module the scenario needs.
    :raise HarnessError: the lab failed (the run is marked failed, what was committed
        stays); ``Stalled`` past ``budget`` seconds.
    """
    kind, cls = registry.experiment(sc)
    with booting(getattr(sc, "kernel", None)) as k:
        if k is not None:
            require_kernel(k, registry.variant(sc), sc)
        cls.preflight(sc)
        return _execute(sc, kind.run_kind, cls, db, (fresh, only), budget, progress, began)


def require_kernel(k: Kernel, variant: registry.Variant, sc: Any) -> None:
    """What the scenario needs of kernel ``k``, before its run is recorded.

    :raise InputError: a ``CONFIG_*`` option it needs is not set.
    :raise NotRun: an out-of-tree module it needs is not built for this kernel.
    """
    for option in variant.kernel_options:
        k.require(option, f"{sc.name} ({sc.experiment_kind})")
    for t in sc.fs_types():
        option = filesystems.get(t).config
        if k.config_value(option) not in ("y", "m"):
            raise NotRun(
                f"{sc.name} on kernel {k.name}: {t} needs CONFIG_{option}, which it lacks",
                hint="choose a kernel with it (scenario kernel list)",
            )
    for m in (*variant.kernel_modules, *sc.kernel_modules()):
        if not k.modules.get(m):
            raise NotRun(
                f"{sc.name} on kernel {k.name}: needs {m}, which is not built for it",
                hint="the image's kernel has it; scenario kernel list shows what each has",
            )


def _execute(
    sc: Any,
    run_kind: str,
    cls: type[Experiment],
    db: Path,
    resume: tuple[bool, str | None],
    budget: float | None,
    progress: Progress,
    began: Callable[[str], None] | None,
) -> Report:
    started = time.monotonic()
    seed = sc.seed  # the one seed: --seed and a campaign's seeds are `seed=N` overrides
    img = require_image()
    params = sc.resolved()
    env = run_env(img, guest=cls.needs_guest(sc))
    with Store.open(db) as st:
        run_id, resumed, not_resumed = _begin(st, sc, run_kind, params, seed, env, resume)
        if began is not None:
            began(run_id)
        run = Run(sc, st, db, run_id, seed, img, resumed, progress)
        exp = cls(run)
        report = Report(run_id, db, sc, exp, resumed, 0, 0, not_resumed=not_resumed)
        try:
            with stall_budget(budget), contextlib.closing(exp):
                _steps(exp, report)
        except BaseException as e:
            status = RunStatus.INTERRUPTED if isinstance(e, KeyboardInterrupt) else RunStatus.FAILED
            # What was found stays found: the account of the items done goes in first.
            report.account = account(exp)
            unfinished = outcome.unfinished_status(report.account)
            st.set_account(run_id, report.account, status=unfinished)
            st.finish_run(run_id, status, {"error": str(e)[:500], **_counts(report.account)})
            raise
        report.seconds = time.monotonic() - started
        report.account = account(exp)
        st.set_account(run_id, report.account)
        a = report.account
        report.summary = {
            **_counts(a),
            "items": report.items,
            "seconds": round(report.seconds, 2),
            **({"expect": a.expect} if a.expect else {}),
            **({"control_failed": a.control_failed} if a.control_failed else {}),
            **exp.summary(),
        }
        # Items the lab failed to judge leave the run unfinished (failed, its summary
        # kept): running the command again resumes it and redoes only those items.
        retry = a.harness > 0 and exp.retries_harness_items
        status = RunStatus.FAILED if retry else RunStatus.DONE
        report.final = RunStatus.INTERRUPTED if exp.more_to_do else status
        st.finish_run(run_id, report.final, report.summary)
    return report


def finished(report: Report) -> str:
    """The run id of a run that judged every item: what a campaign element is done with.

    :raise HarnessError: items the lab failed to judge (harness_error, timeout) leave the
        run unfinished; the element's next attempt resumes it and redoes only those.
    """
    if report.final is RunStatus.FAILED:
        raise HarnessError(
            f"run {report.run_id} left {report.account.harness} item(s) the lab failed to"
            " judge (harness_error, timeout, panic): unfinished",
            hint="the next attempt resumes the run and redoes only those items",
        )
    return report.run_id


def account(exp: Experiment) -> outcome.Account:
    """The run's account from the store: every item's outcome, judged by the kind's rule."""
    run = exp.run
    items = run.store.item_outcomes(run.run_id)
    return outcome.tally(
        (outcome.Tallied(i.item, i.outcome, exp.expected(i), exp.waiver(i)) for i in items),
        getattr(exp.sc, "expect", None),
    )


def _counts(a: outcome.Account) -> dict[str, Any]:
    return {
        "outcome_counts": dict(a.counts),
        **({"expected_outcomes": dict(a.expected)} if a.expected else {}),
    }


def _begin(
    st: Store,
    sc: Any,
    run_kind: str,
    params: Mapping[str, Any],
    seed: int,
    env: RunEnv,
    resume: tuple[bool, str | None],
) -> tuple[str, bool, str | None]:
    """The run to use: an unfinished one of the same scenario, parameters, seed and
    guest image (verdicts of two kernels never share a run; ``resume``: none when fresh,
    only the one named when one is), else a new one."""
    not_resumed = None
    fresh, only = resume
    if not fresh:
        found = st.find_resumable_run(sc.name, params, seed, only=only)
        if found is not None:
            row = st.run(found)
            if row.image_hash in (None, env.image_hash):
                st.resume_run(found)
                st.set_run_env(found, env)
                return found, True, None
            not_resumed = (
                f"run {found} of this scenario is unfinished but used guest image "
                f"{row.image_hash}, not {env.image_hash}: starting a new run"
            )
    run_id = st.begin_run(sc.name, run_kind, params, seed, fs=_fs_of(sc), env=env)
    return run_id, False, not_resumed


def run_env(img: Image, *, guest: bool = True) -> RunEnv:
    """Where every guest of a run runs, recorded once here for every kind: the kernel it
    boots (the image's own, or the one ``--kernel`` chose, with where it came from), the
    accelerator and the QEMU of the selected backend (probed where its guests run; not
    at all for a run without a guest), and the host's and the image's tool versions.

    :raise HarnessError: ``guest`` and the backend's emulator is missing (exit 3).
    """
    packages = img.manifest.get("packages")
    tools = {str(k): str(v) for k, v in packages.items()} if isinstance(packages, dict) else {}
    zfs = img.manifest.get("zfs_version")
    host = {"host": platform.release(), **({"zfs-kmod": str(zfs)} if zfs else {})}
    source = img.manifest.get("kernel_source")
    host["kernel"] = describe(source if isinstance(source, dict) else {"image": img.hash})
    machine = backend.backend().machine(img) if guest else None
    return RunEnv(
        accelerator=Accelerator(machine.accelerator) if machine else None,
        guest_kernel=str(img.manifest.get("kernel") or "") or None,
        qemu_version=machine.emulator if machine else None,
        image_hash=img.hash,
        tool_versions={**host, **tools},
    )


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
        # The account follows every item, so a campaign, a report or a resume reading
        # the run mid-way (or after a kill) sees every finding committed so far.
        run.store.set_account(run.run_id, account(exp))
        finished += 1
        run.progress("checking", finished, len(items))
    exp.finish()


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
