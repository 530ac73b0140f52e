"""Check batches of crash images in up to N guests at once.

Under TCG a check guest checks one state after another (the oracle, mount, umount,
fsck), yet a 2-vCPU guest keeps more than one host core busy; on a 2-core host two guests
of one vCPU each (``vcpus``) check 1.5 times the states one guest does (``check.guests``).
Each batch runs in a thread of its own, holding its guest for the batch's life; whatever
the guest reports comes back to the caller's thread, which alone touches the ledger and
the store.

With one guest the pool is the serial loop it replaces: a submitted batch is waited for
before the caller replays the next, so a guest's recovery times are measured with the
host otherwise idle, as before the pool existed.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger("crashlab.guestpool")
R = TypeVar("R")
T = TypeVar("T")
R_co = TypeVar("R_co", covariant=True)
# Seconds a stopped pool waits for its threads to shut their guests down: a state may
# be hung for its whole timeout; past this the process's end takes the guests with it
# (QEMU is started with PR_SET_PDEATHSIG).
STOP_WAIT = 30.0


def vcpus(guests: int) -> int:
    """vCPUs for each of ``guests`` check guests at once: the host's cores shared out,
    at most 2 (one guest's default). Under TCG on 2 cores, two 2-vCPU guests checked 80
    btrfs states in 55.8 s, one alone 40 in 30.8 s, two 1-vCPU guests 80 in 40.5 s: a
    checking guest keeps a second vCPU busy too, and two such fight for the cores."""
    return max(1, min(2, (os.cpu_count() or 1) // max(1, guests)))


# Disks one check guest takes per vCPU: each virtio-blk disk takes MSI-X vectors of its
# vCPUs' few hundred; a 1-vCPU guest with 100 disks ran out ("virtio_console virtio0:
# Error -28 initializing vqs", so no guest agent), 90 booted (18.3 s).
DISKS_PER_VCPU = 64


def batch_size(wanted: int, cpus: int, total: int = 0, guests: int = 1) -> int:
    """``check.guest_batch``, at most what a guest of ``cpus`` vCPUs can take; with the
    ``total`` of states to check, evened out over as many rounds of ``guests`` batches
    as that takes: 300 states in batches of 64 over two guests left one guest idle for
    the last 44, in batches of 50 none."""
    cap = max(1, min(wanted, DISKS_PER_VCPU * cpus))
    if total <= 0:
        return cap
    rounds = math.ceil(total / (cap * max(1, guests)))
    return max(1, math.ceil(total / (rounds * max(1, guests))))


class Batch(Protocol[R_co]):
    def __len__(self) -> int: ...

    def check(self) -> Iterator[R_co]: ...

    def close(self) -> None: ...


B = TypeVar("B", bound=Batch[Any])


class GuestPool(Generic[B, R]):
    """An open batch being filled (``open``), and up to ``size`` batches being checked.

    Use as a context manager: leaving it (a finished run, an error, Ctrl-C) stops every
    thread after its current state and shuts its guest down.
    """

    def __init__(self, size: int, new_batch: Callable[[int], B]) -> None:
        self.size = max(1, size)
        self._new = new_batch
        self._made = 0
        self.open: B = self._fresh()
        self.busy = 0
        self._q: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    def __enter__(self) -> GuestPool[B, R]:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for th in self._threads:
            th.join(STOP_WAIT)
            if th.is_alive():
                log.warning("%s: its guest is still busy; the process's end stops it", th.name)
        self.open.close()

    def _fresh(self) -> B:
        self._made += 1
        return self._new(self._made)

    def submit(self) -> Iterator[R]:
        """Start checking the open batch in a guest; while every guest is busy, yield
        the results that come back."""
        batch, self.open = self.open, self._fresh()
        self.busy += 1
        # A daemon: a process stopped while a guest boots must not wait out the boot;
        # its guest dies with the thread that started it (PR_SET_PDEATHSIG).
        name = f"check-guest-{self._made}"
        th = threading.Thread(target=self._work, args=(batch,), name=name, daemon=True)
        self._threads.append(th)
        th.start()
        while self.busy >= self.size:
            yield from self._next(block=True)

    def ready(self) -> Iterator[R]:
        """The results already back, without waiting."""
        while not self._q.empty():
            yield from self._next(block=False)

    def finish(self) -> Iterator[R]:
        """Check what is open and wait for every guest; the caller may add to ``open``
        meanwhile (states to check again), which is checked too."""
        while len(self.open) or self.busy:
            if len(self.open):
                yield from self.submit()
            else:
                yield from self._next(block=True)

    def _next(self, *, block: bool) -> Iterator[R]:
        try:
            kind, payload = self._q.get(block=block)
        except queue.Empty:
            return
        if kind == "result":
            yield payload
            return
        self.busy -= 1
        self._threads = [t for t in self._threads if t.is_alive()]
        if kind == "error":
            raise payload

    def _work(self, batch: B) -> None:
        try:
            for r in batch.check():
                self._q.put(("result", r))
                if self._stop.is_set():
                    break  # closing the generator shuts the guest down
            self._q.put(("done", None))
        except BaseException as e:  # the caller's thread raises it
            self._q.put(("error", e))
        finally:
            batch.close()


def parallel(calls: Sequence[Callable[[], T]], size: int) -> Iterator[T]:
    """Each of ``calls`` (each holding a guest for its life) in a daemon thread, at most
    ``size`` at once; their results in the caller's thread as each ends, an exception
    raised there once the calls already running have ended."""
    results: queue.Queue[tuple[bool, Any]] = queue.Queue()

    def run(call: Callable[[], T]) -> None:
        try:
            results.put((True, call()))
        except BaseException as e:  # the caller's thread raises it
            results.put((False, e))

    todo, running, failed = list(calls), 0, None
    while todo or running:
        while todo and running < max(1, size) and failed is None:
            threading.Thread(target=run, args=(todo.pop(0),), daemon=True).start()
            running += 1
        if not running:
            break
        ok, value = results.get()
        running -= 1
        if ok:
            yield value
        elif failed is None:
            failed = value
    if failed is not None:
        raise failed
