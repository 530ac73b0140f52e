"""Campaign elements as Dask tasks: ``scenario campaign run FILE --dask local:N|tcp://...``.

The campaign's bookkeeping is the ``Engine``'s (``campaign.py``), unchanged in meaning:
the same element rows and states, ``max_failures``, ``max_interruptions``, the stall
budget learnt from history, resume after a kill. What differs is where an attempt runs
and how its run reaches the store:

* **One attempt = one Dask task** (``campaign_worker.run``) on a worker, as many at a
  time as the cluster has worker threads. Nothing is shared between hosts: the worker
  runs the element into a scratch store of its own and returns a snapshot of it.
* **One writer.** Only this process writes the main store. A finished attempt's run is
  merged with ONE transaction that also marks the element done (or counts its failure),
  so a kill at any instant leaves either both or neither (``merge.py``: the merge only
  adds, so a finding is never overwritten and nothing is added twice).
* **A worker that dies** takes its attempt with it and nothing else: Dask runs the task
  again on another worker (on the same host it resumes the scratch run). A task that
  keeps killing workers ends as Dask's ``KilledWorker``: one interruption of the element,
  which ``max_interruptions`` quarantines like a single-host element that keeps taking the
  harness down.
* **The guest image by recipe hash.** Every worker is asked first whether it has the
  campaign's image; one that lacks it stops the campaign before anything runs, naming the
  host and how to fix it (exit 3). Building a 6-minute image as a side effect of a task
  would hold an element's stall budget hostage, so it is left to ``scenario image build``.
* A failed attempt is tried again on the host that holds its scratch run when that host
  has a free worker (a soft preference), so it resumes instead of starting afresh.
"""

from __future__ import annotations

import collections
import contextlib
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.campaign import worker as campaign_worker
from harness.campaign.runner import CampaignReport, Engine, Plan, View, failure
from harness.campaign.worker import Attempt, Job
from harness.config.campaign import Campaign, Element
from harness.errors import HarnessError, InputError
from harness.image import build
from harness.store.db import Store


def image_hash() -> str:
    """The guest image the campaign's elements boot: ``$CRASHLAB_IMAGE``'s, else the
    current recipe's (it need not be built on this host)."""
    if os.environ.get("CRASHLAB_IMAGE"):
        return build.require_image().hash
    return build.load_recipe().hash


class DaskEngine(Engine):
    """An ``Engine`` whose attempts are Dask tasks on ``client``'s workers."""

    def __init__(
        self,
        campaign: Campaign,
        db: Path,
        client: Any,
        *,
        view: View | None = None,
        after_element: Callable[[Store, Any], None] | None = None,
        task: Callable[[Job], Attempt] = campaign_worker.run,
    ):
        super().__init__(campaign, db, view=view, after_element=after_element)
        self.client = client
        self.task = task
        self.image = image_hash()

    def _run_elements(self, st: Store, report: CampaignReport) -> None:
        from distributed import wait

        cid = report.campaign_id
        plan = self._plan(st, cid)
        rows = self.rows(st, cid)
        self._probe()
        self.view.start(self.campaign, rows, plan.eta())
        for row in rows:
            self._recover(st, cid, row)
        queue = collections.deque(r.element for r in rows)
        inflight: dict[Any, tuple[Element, float]] = {}
        near: dict[str, str] = {}  # element key -> the host of its scratch run
        try:
            while queue or inflight:
                while queue and len(inflight) < self._slots():
                    el = queue.popleft()
                    if not self._settled(st, cid, el, plan):
                        fut = self._submit(st, cid, el, plan, report, near.get(el.key))
                        inflight[fut] = (el, time.monotonic())
                if not inflight:
                    continue
                done, _ = wait(list(inflight), return_when="FIRST_COMPLETED")  # type: ignore[no-untyped-call]
                for fut in done:
                    el, t0 = inflight[fut]
                    self._finish(st, cid, el, fut, t0, near)
                    del inflight[fut]  # only now: an abort in _finish leaves it pending
                    self.view.finished(self._row(st, cid, el), plan.eta())
                    queue.append(el)
        except BaseException:
            # Stopped by a person or by a lost cluster: not the elements' fault.
            for el, _ in inflight.values():
                self._set(st, cid, el, status="pending", pid=None)
            self.client.cancel(list(inflight))
            raise
        # The scratch stores are no longer needed; a worker that went away keeps its own.
        with contextlib.suppress(Exception):
            self.client.run(campaign_worker.forget, cid, on_error="ignore")

    def _probe(self) -> None:
        """Every worker has the campaign's guest image, or the campaign does not start.

        :raise HarnessError: naming each worker that lacks it.
        """
        answers = self.client.run(campaign_worker.probe, self.image)
        missing = [why for why in answers.values() if why]
        if missing:
            raise HarnessError(
                f"{len(missing)} Dask worker(s) lack the guest image {self.image}",
                detail="\n".join(missing),
                hint="build or copy the image on those hosts, or stop their workers",
            )

    def _slots(self) -> int:
        workers = self.client.scheduler_info().get("workers", {}).values()
        return max(1, sum(int(w.get("nthreads", 1)) for w in workers))

    def _submit(
        self,
        st: Store,
        cid: str,
        el: Element,
        plan: Plan,
        report: CampaignReport,
        host: str | None,
    ) -> Any:
        budget = self._begin(st, cid, el, plan, report)
        job = Job(cid, el.key, el.scenario, el.overrides, el.seed, self.image, budget)
        return self.client.submit(
            self.task,
            job,
            key=f"crashlab-element-{cid}-{el.position}-{uuid.uuid4().hex[:8]}",
            pure=False,
            **({"workers": [host], "allow_other_workers": True} if host else {}),
        )

    def _finish(
        self, st: Store, cid: str, el: Element, fut: Any, t0: float, near: dict[str, str]
    ) -> None:
        """Record one finished task: its run merged and the element's new state, in one
        transaction."""
        from distributed.scheduler import KilledWorker

        if fut.status == "cancelled":
            raise HarnessError(
                "the Dask cluster dropped a campaign element's task",
                detail=str(self.client.scheduler.address),
                hint="is the scheduler still running? run the campaign again to resume",
            )
        try:
            a: Attempt = fut.result()
        except KilledWorker as e:
            why = f"interrupted: its Dask worker died each time it ran it ({e})"
            st.update_element(self._failed(cid, el, why, 0.0, counter="interruptions"))
            return
        except Exception as e:  # a bug in the task: a harness failure, not a loop
            self._fail(st, cid, el, failure(e, None), t0)
            return
        if a.missing:
            raise HarnessError(
                "a Dask worker lacks the campaign's guest image",
                detail=a.missing,
                hint="build or copy the image there, or stop that worker",
            )
        near[el.key] = a.host
        if a.error is None and a.run_id:
            also = self._done(cid, el, a.run_id, a.seconds)
        else:
            also = self._failed(cid, el, a.error or "no run", a.seconds)
        if a.store and a.run_id:
            with tempfile.TemporaryDirectory(prefix="crashlab-merge-") as d:
                src = Path(d) / "scratch.sqlite"
                src.write_bytes(a.store)
                try:
                    st.merge_run(src, a.run_id, [also])
                except InputError as e:
                    raise HarnessError(
                        f"the run of {el.label} from the Dask worker on {a.host} cannot be"
                        " merged into this store",
                        detail=e.message,
                        hint="run the same crashlab version on every lab host",
                    ) from None
        else:
            st.update_element(also)
        if a.error is None:
            self._after(st, cid, el)
