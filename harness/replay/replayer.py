"""Materialise crash states as image files, incrementally.

fstests' replay-log rebuilds every state from entry 0, which makes checking all the
states of a log quadratic. A :class:`Replayer` instead keeps one working image at a
*base*: the log's entries ``[0, base)`` applied for good. ``goto(state)`` moves the base
forward to the state's first divergent entry (the first one it drops or tears, else its
prefix) and applies the rest of the state under an undo journal; ``restore()`` plays the
journal backwards so the image is exactly the base again. Visiting states in order of
their first divergent entry (:func:`replay_order`) therefore reads every log entry about
once, plus each state's short volatile tail.

A state that diverges before the base cannot be reached by going forward, so the image
is zeroed and rebuilt from entry 0; callers should sort (``walk`` does).

The journal keeps the old bytes in memory, skipping holes of the sparse image (it
records them as holes and punches them again on restore).

With ``identity=True`` the replayer also keeps the image's content identity
(:class:`Identity`, ``rp.identity``): equal for two states exactly when their images are
byte-identical (up to a 2**-128 chance), so a state identical to one already judged need
not be checked again. It is kept up to date from what the replayer writes, never by
reading the whole image per state.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

from harness.errors import HarnessError, InputError
from harness.record.logwrites import SECTOR, Entry, Log
from harness.replay.changes import Changes
from harness.replay.crashstates import CrashState

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
_ZEROS = bytes(1 << 20)
# The identity's unit. Measured on the recorded ext4 fixture (bench/bench_identity.py):
# 4 KiB blocks hashed with SHA-256 cost a third of 512-byte ones per byte written (the
# per-call overhead dominates a 512-byte hash), and partial writes need no special case
# because blocks are hashed from the image, lazily (see Identity).
IDENTITY_BLOCK = 4096
_SUM = 1 << 128
_ENTRY = 16  # bytes of a block's hash kept in the table
_SYNC_CHUNK = 256  # blocks read by one pread while syncing

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_fallocate = _libc.fallocate
_fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
_fallocate.restype = ctypes.c_int


def punch_hole(fd: int, offset: int, length: int) -> None:
    """Zero a range, deallocating it where the filesystem can (keeps images sparse)."""
    if length <= 0:
        return
    if _fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return
    err = ctypes.get_errno()
    if err not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        raise HarnessError(f"cannot punch a hole in the image: {os.strerror(err)}")
    end = offset + length
    while offset < end:
        n = os.pwrite(fd, memoryview(_ZEROS)[: min(len(_ZEROS), end - offset)], offset)
        offset += n


def data_extents(fd: int, offset: int, length: int) -> Iterator[tuple[int, int, bool]]:
    """(start, length, is_data) pieces covering the range, via SEEK_DATA / SEEK_HOLE."""
    end = offset + length
    pos = offset
    while pos < end:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            data = end  # no data after pos
        data = min(data, end)
        if data > pos:
            yield pos, data - pos, False
        if data >= end:
            return
        hole = min(os.lseek(fd, data, os.SEEK_HOLE), end)
        yield data, hole - data, True
        pos = hole


def _pread(fd: int, offset: int, length: int) -> bytes:
    buf = os.pread(fd, length, offset)
    if len(buf) != length:
        raise HarnessError(f"short read of the image at byte {offset}")
    return buf


class Identity:
    """The content identity of an image: the sum mod 2**128 over its blocks of
    H(offset, bytes) = the first 16 bytes of SHA-256(offset || bytes), an all-zero block
    counting 0 (so a hole and a written zero block are the same content).

    A sum is a multiset hash: a block changing from ``a`` to ``b`` changes the sum by
    ``H(b) - H(a)``, so it is maintained per block written, not per image. The table
    keeps every block's H as of the last :meth:`sync`; writes only mark blocks dirty, and
    a sync hashes each dirty block once, read back from the image (a block rewritten ten
    times between two states is hashed once, and a partial write needs no read-modify).
    While a state is applied (:meth:`begin` .. :meth:`rollback`) the table entries a sync
    changes are journaled, so going back to the base costs no hashing at all.
    """

    def __init__(self, size: int, block: int | None = None) -> None:
        self.block = block or IDENTITY_BLOCK
        self._table = bytearray(-(-size // self.block) * _ENTRY)
        self._words = memoryview(self._table).cast("Q")  # two little-endian words each
        self._value = 0
        self._dirty: set[int] = set()
        self._undo: list[tuple[int, bytes]] | None = None
        self._base_value = 0

    def _sum(self, a: int, b: int) -> int:
        """Sum of the table's entries for blocks [a, b), from its two 64-bit halves."""
        w = self._words
        return sum(w[2 * a : 2 * b : 2]) + (sum(w[2 * a + 1 : 2 * b : 2]) << 64)

    def _blocks(self, offset: int, length: int) -> range:
        return range(offset // self.block, -(-(offset + length) // self.block))

    def _replace(self, a: int, entries: bytes) -> None:
        """Set the entries from block ``a`` on, journaled while a state is applied."""
        b = a + len(entries) // _ENTRY
        old = self._sum(a, b)
        if self._undo is not None:
            self._undo.append((a, bytes(self._table[a * _ENTRY : b * _ENTRY])))
        self._table[a * _ENTRY : b * _ENTRY] = entries
        self._value = (self._value - old + self._sum(a, b)) % _SUM

    def touch(self, offset: int, length: int) -> None:
        """Bytes [offset, offset + length) may have changed."""
        self._dirty.update(self._blocks(offset, length))

    def zeroed(self, offset: int, length: int) -> None:
        """Bytes [offset, offset + length) are now zero: whole blocks count 0 at once (a
        discard of the whole device costs no read), partial ones are hashed later."""
        span = self._blocks(offset, length)
        a = -(-offset // self.block)
        b = max(a, (offset + length) // self.block)
        if b > a:
            self._dirty.difference_update(range(a, b))
            self._replace(a, bytes((b - a) * _ENTRY))
        self._dirty.update(i for i in (span.start, span.stop - 1) if not a <= i < b)

    def sync(self, fd: int) -> None:
        """Hash the dirty blocks from the image."""
        blocks = sorted(self._dirty)
        self._dirty.clear()
        i = 0
        while i < len(blocks):
            a = blocks[i]
            j = i + 1
            while j < len(blocks) and blocks[j] == blocks[j - 1] + 1 and j - i < _SYNC_CHUNK:
                j += 1
            data = os.pread(fd, (j - i) * self.block, a * self.block)
            self._replace(a, b"".join(self._hash(a, data)))
            i = j

    def _hash(self, first: int, data: bytes) -> Iterator[bytes]:
        zero = _ZEROS[: self.block]
        for k in range(0, len(data), self.block):
            # A bytes slice, not a memoryview: comparing a memoryview for equality goes
            # element by element (24 us per 4 KiB block), a bytes one is a memcmp.
            blk = data[k : k + self.block]
            if blk == zero[: len(blk)]:
                yield bytes(_ENTRY)
                continue
            h = hashlib.sha256((first + k // self.block).to_bytes(8, "little"))
            h.update(blk)
            yield h.digest()[:_ENTRY]

    def begin(self, fd: int) -> None:
        """A state is about to be applied over the base: remember the base."""
        self.sync(fd)
        self._undo = []
        self._base_value = self._value

    def rollback(self) -> None:
        """The image is the base again (:meth:`begin`'s): so is the identity."""
        if self._undo is None:
            return
        for a, entries in reversed(self._undo):
            self._table[a * _ENTRY : a * _ENTRY + len(entries)] = entries
        self._undo = None
        self._value = self._base_value
        self._dirty.clear()  # the base had no dirty block (begin synced it)

    def reset(self) -> None:
        """The image is all zeros."""
        self._table[:] = bytes(len(self._table))
        self._value = 0
        self._dirty.clear()
        self._undo = None

    def hexdigest(self, fd: int) -> str:
        self.sync(fd)
        return f"{self._value:032x}"


class Replayer:
    """A working image of ``device_size`` bytes that visits crash states of ``log``;
    with ``identity``, its content identity too (``rp.identity``).

    :raise InputError: the log writes past ``device_size``.
    """

    def __init__(self, log: Log, image: Path, device_size: int, *, identity: bool = False) -> None:
        if log.extent() > device_size:
            raise InputError(
                f"{log.path}: the log writes up to byte {log.extent()}, past "
                f"the end of a {device_size}-byte device"
            )
        self.log = log
        self.image = image
        self.size = device_size
        self.base = 0
        self.current: CrashState | None = None
        self._journal: list[tuple[int, int, bytes | None]] = []
        self._distrusted = False
        self._identity = Identity(device_size) if identity else None
        self._changes: Changes | None = None
        self._fd = os.open(image, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self._fd, device_size)

    def __enter__(self) -> Replayer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self.log.release()  # what it replayed (Log.release)

    def changes(self) -> Changes:
        """The tracker of the byte ranges this replayer writes from the first call on,
        for the one check that keeps what it derived from the image between states
        (``check.jbd2``); the same tracker every call."""
        if self._changes is None:
            self._changes = Changes()
        return self._changes

    def _wrote(self, offset: int, length: int) -> None:
        if self._changes is not None:
            self._changes.wrote(offset, length)

    # -- applying entries ------------------------------------------------------------

    def save_range(self, offset: int, length: int) -> None:
        """Journal a range before something writes it, so :meth:`restore` undoes it.

        The replayer calls this itself; a checker that modifies the image outside the
        log (a repairing fsck, say) calls it for the ranges it is about to write.
        """
        for start, n, is_data in data_extents(self._fd, offset, length):
            self._journal.append((start, n, _pread(self._fd, start, n) if is_data else None))
        if self._identity is not None:
            self._identity.touch(offset, length)

    def _apply(
        self, e: Entry, journal: bool, runs: Iterable[tuple[int, int]] | None = None
    ) -> None:
        if e.is_discard:
            if journal:
                self.save_range(e.offset, e.length)
            punch_hole(self._fd, e.offset, e.length)
            self._wrote(e.offset, e.length)
            if self._identity is not None:
                self._identity.zeroed(e.offset, e.length)
            return
        if not e.data_len:
            return
        data = self.log.data(e)
        try:
            for s, c in runs if runs is not None else ((0, e.nr_sectors),):
                off, n = s * SECTOR, c * SECTOR
                if journal:
                    self.save_range(e.offset + off, n)
                elif self._identity is not None:
                    self._identity.touch(e.offset + off, n)
                os.pwrite(self._fd, data[off : off + n], e.offset + off)
                self._wrote(e.offset + off, n)
        finally:
            data.release()

    def _check(self, state: CrashState) -> None:
        n = len(self.log.entries)
        bad = (
            state.prefix > n
            or any(not 0 <= i < state.prefix for i in state.dropped)
            or (state.torn is not None and not 0 <= state.torn < state.prefix)
        )
        if state.log_hash != self.log.hash:
            raise InputError(
                f"crash state {state.id} belongs to another log "
                f"(log hash {state.log_hash[:16]}, this log {self.log.hash[:16]})"
            )
        if bad:
            raise InputError(f"crash state {state.id} refers to entries beyond the log's {n}")
        if state.torn is not None:
            nr = self.log.entries[state.torn].nr_sectors
            if any(s < 0 or c < 1 or s + c > nr for s, c in state.torn_runs):
                raise InputError(
                    f"crash state {state.id}: torn runs exceed entry {state.torn}'s {nr} sectors"
                )

    def _zero(self) -> None:
        os.ftruncate(self._fd, 0)
        os.ftruncate(self._fd, self.size)
        self.base = 0
        self._journal.clear()
        if self._changes is not None:
            self._changes.everything()
        if self._identity is not None:
            self._identity.reset()

    def distrust(self) -> None:
        """Something may have written the image outside the journal (a checker killed in
        the middle, whose undo file is incomplete): rebuild it from zero next time."""
        self._distrusted = True
        if self._changes is not None:
            self._changes.everything()

    def advance(self, to: int) -> None:
        """Apply entries ``[base, to)`` for good (restarting from zero if ``to < base``)."""
        if self._journal or self.current is not None:
            self.restore()
        if to < self.base or self._distrusted:
            self._zero()
            self._distrusted = False
        entries = self.log.entries
        for i in range(self.base, to):
            self._apply(entries[i], journal=False)
        self.base = max(self.base, to)

    # -- states ----------------------------------------------------------------------

    def goto(self, state: CrashState) -> None:
        """Set the image to ``state``; :meth:`restore` brings it back to the base.

        :raise InputError: the state is not one of this log's.
        """
        self._goto(state, journal=True)

    def _goto(self, state: CrashState, journal: bool) -> None:
        self._check(state)
        self.advance(state.first_divergent)
        if self._identity is not None:
            self._identity.begin(self._fd)
        dropped = set(state.dropped)
        entries = self.log.entries
        for i in range(self.base, state.prefix):
            if i == state.torn:
                self._apply(entries[i], journal, runs=state.torn_runs)
            elif i not in dropped:
                self._apply(entries[i], journal)
        self.current = state

    def restore(self) -> None:
        """Undo everything written since the base was last reached."""
        for offset, length, old in reversed(self._journal):
            if old is None:
                punch_hole(self._fd, offset, length)
            else:
                os.pwrite(self._fd, old, offset)
            self._wrote(offset, length)
        self._journal.clear()
        self.current = None
        if self._identity is not None:
            self._identity.rollback()

    @property
    def identity(self) -> str:
        """The content identity of the image as it is now (hex): equal for two states
        exactly when their images are byte-identical (``Identity``).

        :raise ValueError: the replayer was made without ``identity=True``.
        """
        if self._identity is None:
            raise ValueError("this Replayer keeps no identity (pass identity=True)")
        return self._identity.hexdigest(self._fd)

    @contextlib.contextmanager
    def at(self, state: CrashState) -> Iterator[Path]:
        """The image set to ``state`` for the duration of the block."""
        self.goto(state)
        try:
            yield self.image
        finally:
            self.restore()

    def walk(self, states: Iterable[CrashState]) -> Iterator[CrashState]:
        """Visit ``states`` in replay order, the image set to each while it is yielded."""
        for state in replay_order(states):
            self.goto(state)
            try:
                yield state
            finally:
                self.restore()

    def digest(self) -> str:
        return image_digest(self.image)

    def verify_base(self) -> bool:
        """Whether the image equals the log's first ``base`` entries built from scratch
        (for tests and ``--paranoid`` runs: it rebuilds a whole image)."""
        scratch = self.image.with_name(self.image.name + ".verify")
        try:
            _build(self.log, scratch, self.size, self.base)
            return image_digest(scratch) == self.digest()
        finally:
            scratch.unlink(missing_ok=True)


def replay_order(states: Iterable[CrashState]) -> list[CrashState]:
    """The order in which a :class:`Replayer` never has to go back."""
    return sorted(states, key=lambda s: (s.first_divergent, s.prefix, s.id))


def _build(log: Log, out: Path, size: int, prefix: int) -> Replayer:
    r = Replayer(log, out, size)
    try:
        r.advance(prefix)
    finally:
        r.close()
    return r


def materialize(log: Log, state: CrashState, out: Path, size: int) -> Path:
    """Build one state from scratch into ``out`` (for ``scenario reproduce``).

    :raise InputError: the state is not one of this log's, or the log does not fit.
    """
    with Replayer(log, out, size) as r:
        r._goto(state, journal=False)  # the state is the result: nothing to undo
    return out


def combined(*identities: str) -> str:
    """One identity of several images checked together (a filesystem and its log
    device), as long as the first's."""
    joined = ":".join(identities).encode()
    return hashlib.sha256(joined).hexdigest()[: len(identities[0])]


def image_digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
