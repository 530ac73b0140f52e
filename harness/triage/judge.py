"""Judging triage candidates: host checks first, then one guest for a whole round.

Every candidate is replayed into one working image (a :class:`Replayer` keeping its
content identity), so a candidate whose image was judged before -- earlier in the
triage, or by another candidate of the same round -- takes that symptom without a check.
The host checker (real, userspace, about a second) runs first; when it already says
worse than the failing state's verdict, the candidate cannot fail the same way and the
guest is not asked. The rest of the round is mounted in one guest (``check_batch``, many
disks per boot), each judged by the *failing state's* mark and exactness (``delta.py``).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from harness.check import guest as guestcheck
from harness.check import host as check
from harness.check import parallel
from harness.check.host import CheckResult
from harness.model import oracle
from harness.outcome import is_harness
from harness.record.logwrites import Log
from harness.replay import replayer as replay
from harness.replay.corrupt import zero_durable_block
from harness.replay.crashstates import CrashState
from harness.triage import symptom
from harness.triage.target import Target

ORACLE_KEY = "triage"


class Judge:
    """Candidates of one failing state -> their symptoms (``__call__``); ``tally`` counts
    what was asked of the checkers. Use as a context manager (it owns a working image)."""

    def __init__(self, t: Target, lg: Log, scratch: Path) -> None:
        self.t = t
        self.scratch = scratch
        scratch.mkdir(parents=True, exist_ok=True)
        self.rp = replay.Replayer(lg, scratch / "work.img", t.size, identity=True)
        self.seen: dict[str, symptom.Symptom] = {}  # image identity -> its symptom
        self.identity: dict[str, str] = {}  # candidate id -> image identity
        self.tally = symptom.Tally()

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.rp.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __call__(
        self, states: Sequence[CrashState], worse_than: symptom.Symptom | None
    ) -> list[symptom.Symptom]:
        """The symptom of each of ``states``; with ``worse_than``, a host verdict worse
        than its outcome decides a candidate without the guest."""
        batch = self.scratch / "batch"
        shutil.rmtree(batch, ignore_errors=True)
        batch.mkdir()
        waiting: dict[str, tuple[guestcheck.Item, CheckResult | None]] = {}
        for s in replay.replay_order(states):
            with self.rp.at(s):
                ident = self.rp.identity
                self.identity[s.id] = ident
                if ident in self.seen or ident in waiting:
                    self.tally.same_image += 1
                    continue
                host = self._host()
                if host is not None and self._decided(host, worse_than):
                    self._judged(ident, symptom.of([host], decided_on_host=True))
                    continue
                if not self.t.check.guest:
                    self._judged(ident, symptom.of([host] if host else []))
                    continue
                copy = batch / f"{len(waiting)}.img"
                check.copy_image(self.rp.image, copy)
                self._damage(copy)
                item = guestcheck.Item(
                    ident, copy, self.t.state.mark, self.t.state.exact, ORACLE_KEY
                )
                waiting[ident] = (item, host)
        self._guest(list(waiting.values()))
        shutil.rmtree(batch, ignore_errors=True)
        return [self.seen[self.identity[s.id]] for s in states]

    def known(self, state: CrashState) -> symptom.Symptom:
        """The symptom of a state judged by an earlier call (candidate ids are content
        addresses, so a subset asked again has the id it had).

        :raise KeyError: it was not judged.
        """
        return self.seen[self.identity[state.id]]

    def _host(self) -> CheckResult | None:
        if not self.t.check.host:
            return None
        self.tally.host += 1
        return parallel.checked(
            self.rp, str(self.t.fs.type), self.scratch / "host", self.t.check.timeout
        )

    @staticmethod
    def _decided(host: CheckResult, worse_than: symptom.Symptom | None) -> bool:
        if is_harness(host.outcome):
            return True  # the lab could not tell: never "the same way"
        return worse_than is not None and host.outcome.severity > worse_than.outcome.severity

    def _damage(self, image: Path) -> None:
        if self.t.corrupt == "zero-durable-block":
            s = self.t.state
            zero_durable_block(image, str(self.t.fs.type), dict(self.t.oracle.raw), s.mark, s.exact)

    def _guest(self, waiting: list[tuple[guestcheck.Item, CheckResult | None]]) -> None:
        raw = dict(self.t.oracle.raw) if self.t.oracle else {}
        if raw and not self.t.check.times and "marks" in raw:  # as the run judged it
            raw = oracle.untimed(raw)
        oracles = {ORACLE_KEY: raw} if raw else {}
        size = max(1, self.t.check.guest_batch)
        for i in range(0, len(waiting), size):
            chunk = waiting[i : i + size]
            host = {item.key: h for item, h in chunk}
            self.tally.guest += len(chunk)
            self.tally.guest_boots += 1
            items = [item for item, _ in chunk]
            # The run's recovery modes too: a finding one of them made is found again.
            for key, results in guestcheck.check_batch(
                items, self.t.fs, oracles, timeout=self.t.check.timeout,
                modes=self.t.check.recovery,
            ):  # fmt: skip
                got = [h for h in (host[key], *results) if h is not None]
                self._judged(key, symptom.of(got))

    def _judged(self, ident: str, found: symptom.Symptom) -> None:
        self.seen[ident] = found
        if is_harness(found.outcome):
            self.tally.harness += 1
