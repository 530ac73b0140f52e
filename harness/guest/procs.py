"""Two or more processes at once (``workload.processes``, runs inside the guest, stdlib
only): each draws its own seeded ops in its own directory ``pK`` and makes their calls
at the same time as the others, so an fsync of one races the writes, truncates and
renames of another in the same filesystem (one journal, one log tree).

Each process is a thread: the system calls release Python's lock, so the kernel runs
them at once on the guest's vCPUs. What the oracle holds, and why it is sound:

- A call is recorded when it *returns*, in the order the calls returned (``returned``,
  under one lock: the model, the op list and the marks in one order). A persistence
  op's mark is placed then, so a state cut at a mark holds what every call that had
  returned before it made durable.
- The processes share no name: a process's fsync, fdatasync or directory fsync promises
  only its own files and directory, which no other process touches, so an op of
  another process -- returned before, during or after it -- never changes what it
  promised. A drawn sync (which would promise every process's ops, including one still
  in flight) becomes the fsync of the process's own directory.
- A call in flight when a mark is placed is recorded after it, and its effects may be in
  a state cut anywhere since it *started*: another process's fsync commits the journal
  its call joined (measured: ext4 on 6.12.118, an unlink of one process committed by
  another's fsync before the mark that preceded its return). So every mark placed while
  it ran stops requiring the names it touched (``Tracker.late``), as rule 2 frees a
  mark's own interval; and no cut is judged exact (rule 3 is off).

Repeatable as far as the kernel lets it be: each process's ops are fixed by the seed and
its number; the interleaving is the kernel's, and the op list says which it was.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

from ..model.generate import Generator
from ..model.ops import Op
from ..model.oracle import Model


def home(k: int) -> str:
    """Process ``k``'s directory."""
    return f"p{k}"


def placed(op: Op, k: int) -> Op:
    """A process's op (drawn in its own namespace) in the shared one: its names under
    ``pK``, its descriptors named ``pK.NAME``, a sync as the fsync of ``pK``."""
    if op.kind in ("sync", "syncfs"):
        return Op("fsync_dir", home(k))
    under = f"{home(k)}/{op.path}" if op.path else home(k)
    return dataclasses.replace(
        op,
        path=under if op.path or op.kind == "fsync_dir" else op.path,
        dst=f"{home(k)}/{op.dst}" if op.dst else "",
        fd=f"{home(k)}.{op.fd}" if op.fd else "",
    )


def seed_of(seed: int, k: int) -> int:
    """Process ``k``'s generator seed: fixed by the run's seed and ``k``."""
    return seed * 64 + k


def run(
    n: int,
    count: int,
    generator: Callable[[int], Generator],
    fsync_names: bool,
    call: Callable[[Op, int], int],
    returned: Callable[[Op, int, int], None],
) -> BaseException | None:
    """``count`` ops in all, drawn and called by ``n`` processes at once; ``call(op, k)``
    makes process ``k``'s call and says how many marks were placed when it started,
    ``returned(op, k, since)`` records it. The first error stops every process after
    its current call and is returned."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def process(k: int) -> None:
        gen, own = generator(k), Model(fsync_names)
        for _ in range(count // n + (k < count % n)):
            if stop.is_set():
                return
            op = gen.next(own)
            own.apply(op)
            op = placed(op, k)
            try:
                returned(op, k, call(op, k))
            except BaseException as e:  # handed to the caller, which raises it
                errors.append(e)
                stop.set()
                return

    threads = [threading.Thread(target=process, args=(k,), name=home(k)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors[0] if errors else None
