"""A crash during recovery (issue 23, item 4; docs/recovery-crash.md).

Recovery writes too: ext4 replays its journal at mount, xfs its log, btrfs its log tree.
Power can fail while it does, and the next mount must still recover. For a sample of a
run's crash states judged consistent (its *parents*), the recovery of each is recorded
in a guest under dm-log-writes (``harness/record/recovery.py``), that log is cut into
FUA and mark states after its base mark, and each state is checked like any crash state
but judged *as its parent*: the oracle of the parent's cut (its last mark, exact or not)
must accept what the filesystem makes of it. Nothing a recovery does may lose what the
crash it recovers from kept.

The recordings are kept in ``<run>/recovery/<parent>/`` (a resumed run records only what
is missing); each state is stored with its parent's id (``crash_states.parent``).
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.config.crash import FsSpec
from harness.crashstate import checking
from harness.errors import HarnessError
from harness.outcome import Outcome
from harness.record import logwrites
from harness.record import recovery as record
from harness.replay import crashstates
from harness.replay import replayer as replay

# Where a power cut during recovery can fall: each FUA the recovery wrote (jbd2's
# commit and superblock updates are FUA writes) and each mark (the copied image, the
# recovery done, the unmount).
GENERATORS = ({"kind": "fua"}, {"kind": "mark"})
DONE = "recorded.json"


def pick_parents(
    states: Sequence[crashstates.CrashState],
    outcomes: Mapping[str, Outcome],
    sample: int,
    seed: int,
    *,
    fsck_recovers: bool = False,
) -> list[crashstates.CrashState]:
    """``sample`` of the states judged consistent (or, where a full fsck is the
    recovery, ``fsck_recovers``, repaired: the expected verdict there), drawn with the
    run's seed, in log order. A state with another verdict is a finding already (or the
    lab's failure): its recovery is not the promise being tested."""
    good = {Outcome.CONSISTENT, *((Outcome.REPAIRED,) if fsck_recovers else ())}
    eligible = [s for s in states if outcomes.get(s.id) in good]
    if sample < len(eligible):
        eligible = random.Random(seed).sample(eligible, sample)
    return sorted(eligible, key=lambda s: (s.prefix, s.id))


def cut(lg: logwrites.Log, seed: int, most: int) -> list[crashstates.CrashState]:
    """A recovery log's crash states: at each FUA and mark after its base mark (the
    parent's image), at most ``most`` spread evenly over the log.

    :raise HarnessError: the log has no base mark (it is not a recovery recording).
    """
    base = lg.find_mark(record.BASE_MARK)
    if base is None:
        raise HarnessError(f"{lg.path}: no {record.BASE_MARK!r} mark: not a recovery log")
    found = crashstates.generate(lg, [dict(g) for g in GENERATORS], seed, start=base)
    return crashstates.spread(found, most)


def sources(
    rdir: Path,
    fs: FsSpec,
    lg: logwrites.Log,
    parents: Sequence[crashstates.CrashState],
    *,
    oracle: dict[str, Any],
    size: int,
    seed: int,
    most: int,
    timeout: float,
    stack: contextlib.ExitStack,
) -> list[checking.Source]:
    """Each parent's recovery log (recorded now unless kept from an earlier attempt),
    opened on ``stack``, with its states to check as the parent."""
    out = rdir / "recovery"
    missing = [p for p in parents if not (out / p.id / DONE).exists()]
    if missing:
        images = []
        for p in missing:
            (out / p.id).mkdir(parents=True, exist_ok=True)
            image = out / p.id / "image.raw"
            replay.materialize(lg, p, image, size)
            images.append((p.id, image))
        for rec in record.record_recoveries(fs, images, out, timeout=timeout):
            (out / rec.key / "image.raw").unlink()  # its bytes are the log's base
            (out / rec.key / DONE).write_text(json.dumps({"recovery_seconds": rec.seconds}))
    found = []
    for p in parents:
        rlog = stack.enter_context(logwrites.open_log(out / p.id / "log.raw"))
        found.append(
            checking.Source(
                rlog, cut(rlog, seed, most), dict(oracle), size, f"recovery-{p.id}", judged_as=p
            )
        )
    return found
