"""Which bytes of a working image changed since someone last looked.

A check that derives something from the image (``check.jbd2``: which blocks a journal
replay can write, from ~500 journal blocks read a state) can redo only what the writes
since its last look touched. The :class:`~harness.replay.replayer.Replayer` tells its
one :class:`Changes` (``rp.changes()``, made on the first call) each range it writes,
punches or puts back, and that the whole image changed when it rebuilds it from zero or
is told not to trust it.
"""

from __future__ import annotations

# Past this many ranges since the last look the consumer redoes everything anyway
# (a state far from the last one checked); keeps a tracker nobody reads bounded.
MAX_RANGES = 1 << 16


class Changes:
    """The byte ranges written since :meth:`take`; ``memo``: what the consumer derived
    from the image as it was at that :meth:`take` (its own business, None when it has
    nothing it trusts)."""

    def __init__(self) -> None:
        self._ranges: list[tuple[int, int]] | None = None  # None: anything may have changed
        self.memo: object = None

    def wrote(self, offset: int, length: int) -> None:
        r = self._ranges
        if r is not None:
            if len(r) >= MAX_RANGES:
                self._ranges = None
            else:
                r.append((offset, length))

    def everything(self) -> None:
        self._ranges = None

    def take(self) -> list[tuple[int, int]] | None:
        """The ranges written since the last call (None: treat everything as changed),
        and start counting afresh."""
        out, self._ranges = self._ranges, []
        return out
