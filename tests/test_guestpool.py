"""The check-guest pool with batches that stand in for guests: threads, no QEMU (the
pool's guests are ``tests/test_search_vm.py``'s)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest

from harness.crashstate.guestpool import GuestPool


class FakeBatch:
    """Items "checked" one after another, each taking ``delay`` seconds; records which
    batches were being checked at once."""

    live: ClassVar[set[int]] = set()
    overlap: ClassVar[int] = 0
    lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, n: int, delay: float = 0.02, fail_at: int | None = None) -> None:
        self.n, self.delay, self.fail_at = n, delay, fail_at
        self.items: list[str] = []
        self.closed = False
        self.stopped_at: int | None = None

    def __len__(self) -> int:
        return len(self.items)

    def add(self, item: str) -> None:
        self.items.append(item)

    def check(self) -> Iterator[str]:
        with FakeBatch.lock:
            FakeBatch.live.add(self.n)
            FakeBatch.overlap = max(FakeBatch.overlap, len(FakeBatch.live))
        try:
            for i, it in enumerate(self.items):
                time.sleep(self.delay)
                if i == self.fail_at:
                    raise RuntimeError(f"batch {self.n}: the guest could not be driven")
                self.stopped_at = i
                yield it
        finally:
            with FakeBatch.lock:
                FakeBatch.live.discard(self.n)

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def _reset() -> None:
    FakeBatch.live, FakeBatch.overlap = set(), 0


def run(size: int, items: int, per_batch: int) -> tuple[list[str], list[FakeBatch]]:
    made: list[FakeBatch] = []

    def new(n: int) -> FakeBatch:
        made.append(FakeBatch(n))
        return made[-1]

    out: list[str] = []
    with GuestPool[FakeBatch, str](size, new) as pool:
        for i in range(items):
            out += pool.ready()
            pool.open.add(f"s{i}")
            if len(pool.open) >= per_batch:
                out += pool.submit()
        out += pool.finish()
    return out, made


@pytest.mark.parametrize("size", [1, 2, 3])
def test_every_item_comes_back_once_and_every_batch_is_closed(size: int) -> None:
    out, made = run(size, 23, 5)
    assert sorted(out) == sorted(f"s{i}" for i in range(23))
    assert all(b.closed for b in made)
    # one guest: the serial loop (never two batches at once); more: they overlap
    assert FakeBatch.overlap == 1 if size == 1 else FakeBatch.overlap >= 2
    assert FakeBatch.overlap <= size


def test_serial_pool_waits_for_a_batch_before_the_next_is_filled() -> None:
    order: list[str] = []

    def new(n: int) -> FakeBatch:
        return FakeBatch(n)

    with GuestPool[FakeBatch, str](1, new) as pool:
        for i in range(4):
            pool.open.add(f"s{i}")
            order.append(f"add s{i}")
            if len(pool.open) == 2:
                order += [f"back {r}" for r in pool.submit()]
        order += [f"back {r}" for r in pool.finish()]
    assert order == [
        "add s0",
        "add s1",
        "back s0",
        "back s1",
        "add s2",
        "add s3",
        "back s2",
        "back s3",
    ]


def test_a_batchs_error_is_raised_in_the_callers_thread_after_its_results() -> None:
    made: list[FakeBatch] = []

    def new(n: int) -> FakeBatch:
        made.append(FakeBatch(n, fail_at=2 if n == 1 else None))
        return made[-1]

    got: list[str] = []
    failed = pytest.raises(RuntimeError, match="batch 1: the guest could not be driven")
    with failed, GuestPool[FakeBatch, str](2, new) as pool:
        for i in range(8):
            pool.open.add(f"s{i}")
        for r in pool.finish():
            got.append(r)
    assert got[:2] == ["s0", "s1"]  # what was judged before the failure is kept
    assert all(b.closed for b in made)


def test_leaving_the_pool_stops_its_guests_after_their_current_item() -> None:
    made: list[FakeBatch] = []

    def new(n: int) -> FakeBatch:
        made.append(FakeBatch(n, delay=0.05))
        return made[-1]

    with GuestPool[FakeBatch, str](2, new) as pool:
        for i in range(40):
            pool.open.add(f"s{i}")
        list(pool.submit())  # two guests: this returns at once
    first = made[0]
    assert first.closed and first.stopped_at is not None and first.stopped_at < 39


def test_a_guests_disks_are_capped_by_its_vcpus() -> None:
    from harness.crashstate import guestpool

    assert guestpool.batch_size(100, 1) == guestpool.DISKS_PER_VCPU
    assert guestpool.batch_size(100, 2) == 100 and guestpool.batch_size(0, 2) == 1
    assert 1 <= guestpool.vcpus(2) <= 2 and guestpool.vcpus(64) == 1
    # evened out: the same rounds of guests, none idle in the last
    assert guestpool.batch_size(100, 1, total=300, guests=2) == 50
    assert guestpool.batch_size(40, 2, total=41, guests=1) == 21
    assert guestpool.batch_size(40, 2, total=10, guests=2) == 5
    assert guestpool.batch_size(40, 2, total=80, guests=1) == 40


def test_parallel_calls_run_at_most_size_at_once_and_raise_in_the_caller() -> None:
    from harness.crashstate import guestpool

    live: set[int] = set()
    most = [0]

    def call(i: int, fail: bool = False) -> int:
        live.add(i)
        most[0] = max(most[0], len(live))
        time.sleep(0.03)
        live.discard(i)
        if fail:
            raise RuntimeError(f"call {i}: no guest")
        return i

    calls = [lambda i=i: call(i) for i in range(5)]
    assert sorted(guestpool.parallel(calls, 2)) == [0, 1, 2, 3, 4] and most[0] == 2
    most[0] = 0
    assert sorted(guestpool.parallel(calls, 1)) == [0, 1, 2, 3, 4] and most[0] == 1
    got: list[int] = []
    bad = [lambda: call(0), lambda: call(1, fail=True), lambda: call(2), lambda: call(3)]
    with pytest.raises(RuntimeError, match="call 1: no guest"):
        got += guestpool.parallel(bad, 2)
    assert 3 not in got  # nothing new is started once a call failed
