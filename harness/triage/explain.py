"""``scenario explain STATE-ID``: the writes of a stored crash state, each block named.

Which writes: ``--entries first..last`` if given; else those the state drops or tears
(what a reorder or torn state differs by); else those after its last mark, up to its cut
(what a FUA state adds to what the mark made durable). The images are rebuilt from the
run's log in a scratch directory and removed after.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness import proc
from harness.check.host import copy_image
from harness.crashstate import statelog
from harness.crashstate.stored import stored_state
from harness.errors import InputError
from harness.record import logwrites
from harness.replay import crashstates
from harness.replay import replayer as replay
from harness.store.db import Store
from harness.triage import blocks

JOURNALED = ("ext3", "ext4")


@dataclass(frozen=True)
class Explained:
    run_id: str
    state: crashstates.CrashState
    which: str  # what the entries are, in words
    explanation: blocks.Explanation


def parse_entries(text: str) -> tuple[int, int]:
    """``first..last`` (or one entry ``n``) -> (first, last).

    :raise InputError: anything else, naming the value.
    """
    first, dots, last = text.partition("..")
    try:
        pair = (int(first), int(last if dots else first))
    except ValueError:
        raise InputError(
            f"--entries {text!r}: expected FIRST..LAST", hint="e.g. --entries 150..160"
        ) from None
    if pair[0] < 0 or pair[1] < pair[0]:
        raise InputError(f"--entries {text!r}: FIRST..LAST with 0 <= FIRST <= LAST")
    return pair


def chosen(
    state: crashstates.CrashState, n_entries: int, span: tuple[int, int] | None
) -> tuple[list[int], str]:
    """The entries to explain and why them (the module docstring's order)."""
    if span is not None:
        if span[1] >= n_entries:
            raise InputError(f"--entries {span[0]}..{span[1]}: the log has {n_entries} entries")
        return list(range(span[0], span[1] + 1)), f"entries {span[0]}..{span[1]}"
    if state.dropped or state.torn is not None:
        torn = [] if state.torn is None else [state.torn]
        return sorted({*state.dropped, *torn}), "the writes the state drops or tears"
    start = 0 if state.mark_index is None else state.mark_index + 1
    return list(range(start, state.prefix)), (
        f"the writes after mark {state.mark!r} (entry {state.mark_index}) up to the cut"
    )


def explain_state(state_id: str, db: Path, span: tuple[int, int] | None = None) -> Explained:
    """Explain the chosen writes of stored state ``state_id``.

    :raise InputError: no such state, or entries out of the log.
    """
    run_id, state = stored_state(state_id, db)
    with Store.open(db, create=False) as st:
        fs_type = st.run(run_id).fs or ""
    where = statelog.of(run_id, state)
    size = where.device_size()
    with logwrites.open_log(where.log) as lg:
        indices, which = chosen(state, len(lg.entries), span)
        x = explain_writes(lg, state, size, fs_type, indices)
    return Explained(run_id, state, which, x)


def explain_writes(
    lg: logwrites.Log,
    state: crashstates.CrashState,
    size: int,
    fs_type: str,
    indices: list[int],
) -> blocks.Explanation:
    """Entries ``indices`` of ``lg`` named as state ``state`` (of a ``size``-byte device)
    and the log's end see them; the images are built in a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="crashlab-explain-") as tmp:
        entries = [lg.entries[i] for i in indices]
        applied, owners = _images(lg, state, size, Path(tmp), fs_type)
        return blocks.explain(fs_type, applied, entries, owners, lambda e: bytes(lg.data(e)))


def whole(lg: logwrites.Log, prefix: int) -> crashstates.CrashState:
    """The state applying every entry before ``prefix``, none dropped."""
    sid = crashstates.state_id(lg.hash, prefix, (), None, ())
    return crashstates.CrashState(sid, lg.hash, prefix)


def _images(
    lg: logwrites.Log, state: crashstates.CrashState, size: int, tmp: Path, fs_type: str
) -> tuple[Path, list[tuple[Path, str]]]:
    """The image whose layout and journal name the writes (the state's cut with nothing
    dropped, so a dropped journal block is still there to read), and the images asked
    for owners: the state after journal recovery, then the log's end."""
    applied = replay.materialize(lg, whole(lg, state.prefix), tmp / "applied.img", size)
    own = replay.materialize(lg, state, tmp / "state.img", size)
    end = replay.materialize(lg, whole(lg, len(lg.entries)), tmp / "end.img", size)
    return applied, [(_recovered(own, fs_type), ""), (_recovered(end, fs_type), "at the log's end")]


def _recovered(image: Path, fs_type: str) -> Path:
    """``image`` with its journal replayed in userspace (``e2fsck -E journal_only``):
    committed transactions hold the allocations a crash state's writes belong to. An
    image e2fsck cannot recover is asked as it is."""
    if fs_type not in JOURNALED:
        return image
    out = image.with_suffix(".recovered.img")
    copy_image(image, out)
    r = proc.run(["e2fsck", "-E", "journal_only", "-y", out], check=False)
    return out if r.returncode in (0, 1) else image
