"""The journal replay of an ext3/ext4 crash state, and putting the image back after it.

The image is the Replayer's working image: the next state is built on it incrementally,
so whatever the replay writes must be put back byte for byte. Two ways:

- the blocks the replay can write are known beforehand (``jbd2.replay_writes``): they
  are saved in memory, e2fsck runs without an undo file, and they are written back. A
  guard checks the superset on a sample of states (``GUARD_EVERY``): e2fsck's test I/O
  manager (built into Debian's e2fsck, on when ``TEST_IO_FLAGS`` is set) logs every
  write it makes, and a write outside the saved blocks is a harness error -- the caller
  then rebuilds the image (``distrust``).
- anything ``jbd2`` does not model: ``e2fsck -z UNDO``, undone from the undo file
  (``e2undo``). That costs e2fsck's undo writes, ~14 ms a state on a 2 GiB ext4 against
  its 67 ms check (bench/README.md).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from harness import proc
from harness.check import e2undo, extfs, jbd2
from harness.errors import HarnessError
from harness.replay.changes import Changes

Runner = Callable[..., proc.Result]
# e2fsck -z fsyncs its undo file five times per check (e2fsprogs 1.47): in a scratch
# directory on disk that costs more than the check itself (bench/README.md), on a tmpfs
# nothing. The file holds only what the journal replay overwrote and lives for one check.
UNDO_DIR = Path("/dev/shm")
# lib/ext2fs/test_io.c: log writes (0x2), block-size changes (0x4, to turn block numbers
# into bytes), discards (0x40) and zero-outs (0x100), into TEST_IO_LOGFILE (_Guard).
GUARD_ENV = {"TEST_IO_FLAGS": "0x146"}
# Which replays the guard watches: the first GUARD_FIRST of each process, then one in
# GUARD_EVERY. Logging costs e2fsck a line per write -- 10,000 lines, 6 ms of a 70 ms
# check, on a 2 GiB ext4 whose journal is full (bench/README.md) -- so every state is
# watched only in the tests (tests/test_jbd2.py: every state of the recorded logs).
# A gap in the model shows on the first replays of the run that meets it, or within
# GUARD_EVERY states after; GUARD_EVERY = 1 watches every state.
GUARD_FIRST, GUARD_EVERY = 8, 16
_replays = itertools.count()
_GUARD_LINE = re.compile(
    rb"Test_io: (write_blk|write_blk64|write_byte|discard|zeroout)\((\d+), (-?\d+)\) returned OK"
)


@contextlib.contextmanager
def replayed(
    image: Path, scratch: Path, run: Runner, changes: Changes | None = None
) -> Iterator[proc.Result]:
    """Replay the journal of ``image`` (``e2fsck -E journal_only -p``) for the block;
    after it, also on an error or a timeout, the image is as it was. ``changes``: the
    working image's tracker, when a Replayer keeps it (``jbd2.replay_writes``).

    :raise HarnessError: the replay wrote where nothing was saved (the image is then
        not as it was: the caller must rebuild it), or the guard could not watch it.
    """
    argv: list[str | Path] = ["e2fsck", "-E", "journal_only", "-p"]
    try:
        with open(image, "rb") as f:
            ranges = jbd2.replay_writes(f.fileno(), changes)
    except (extfs.Unsure, OSError):  # an image it cannot read: e2fsck says why, as before
        undo = _undo_file(scratch)
        undo.unlink(missing_ok=True)
        try:
            yield run([*argv, "-z", undo, image])
        finally:
            _undo(undo, image)
        return
    saved = _save(image, ranges)
    try:
        if not _guard_this():
            yield run([*argv, image])
            return
        with _Guard() as guard:
            r = run([*argv, image], env=guard.env, pass_fds=[guard.w])
        stray = _strays(guard.written(), ranges)
        if stray:
            raise HarnessError(
                f"e2fsck's journal replay wrote {len(stray)} range(s) crashlab had not "
                f"saved, first {stray[0][1]} bytes at byte {stray[0][0]} of {image}: not a "
                "finding; the working image is rebuilt",
                hint="harness/check/jbd2.py misses a write of e2fsck's: report the state",
                detail=r.stdout + r.stderr,
            )
        yield r
    finally:
        _put_back(image, saved)


def _guard_this() -> bool:
    n = next(_replays)
    return n < GUARD_FIRST or n % GUARD_EVERY == 0


class _Guard:
    """e2fsck's test I/O manager logging its writes into a pipe this process drains.

    A pipe, not a file: test_io opens its log with fopen(.., "w") each time e2fsck opens
    the filesystem (three times around a journal replay), which would truncate a file;
    and not stderr, which e2fsck makes unbuffered: a line per write, 10,000 writes a
    state on a 2 GiB ext4, cost 60 ms (fully buffered into the pipe: nothing to see).
    """

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        self.env = {**GUARD_ENV, "TEST_IO_LOGFILE": f"/dev/fd/{self.w}"}
        self._chunks: list[bytes] = []
        self._drain = threading.Thread(target=self._read, daemon=True)
        self._drain.start()

    def _read(self) -> None:
        while chunk := os.read(self.r, 1 << 16):
            self._chunks.append(chunk)

    def __enter__(self) -> _Guard:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.w)  # e2fsck has exited: the reader sees the end of the pipe
        self._drain.join()
        os.close(self.r)

    def written(self) -> list[tuple[int, int]]:
        """The byte ranges e2fsck wrote (each distinct write once).

        :raise HarnessError: a line this reader does not know, or no line at all (no
            test I/O manager in this e2fsck): nothing can vouch for the image.
        """
        text = b"".join(self._chunks)
        # Each run of lines after a block-size change, its distinct lines once: the
        # replay rewrites the same few hundred blocks thousands of times.
        runs = text.split(b"Test_io: set_blksize(")
        if len(runs) < 2:
            raise HarnessError(
                "e2fsck's test I/O manager (TEST_IO_FLAGS) logged nothing: cannot check "
                "what its journal replay wrote",
                hint="e2fsprogs built without --enable-testio-debug? Debian's has it",
            )
        out: list[tuple[int, int]] = []
        bs = 1024  # every channel starts at 1 KiB (test_open, unix_open)
        for k, run in enumerate(runs):
            lines = set(run.split(b"\n"))
            if k:
                first = run.split(b")", 1)[0]
                bs = int(first)
                lines.discard(first + b") returned OK")
            lines.discard(b"")
            for line in lines:
                m = _GUARD_LINE.fullmatch(line)
                if m is None:
                    raise HarnessError(f"e2fsck's test I/O manager logged {line!r}")
                op, a, b = m.group(1), int(m.group(2)), int(m.group(3))
                if op == b"write_byte":
                    out.append((a, b))
                elif op in (b"write_blk", b"write_blk64"):
                    out.append((a * bs, -b if b < 0 else b * bs))
                else:  # discard, zeroout: (block, count)
                    out.append((a * bs, b * bs))
        return out


def _strays(written: list[tuple[int, int]], ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The writes not inside one of the (sorted, merged) saved ranges."""
    starts = [o for o, _ in ranges]
    return [w for w in written if not _covered(w, ranges, starts)]


def _save(image: Path, ranges: list[tuple[int, int]]) -> list[tuple[int, bytes]]:
    fd = os.open(image, os.O_RDONLY)
    try:
        return [(off, os.pread(fd, n, off)) for off, n in ranges]
    finally:
        os.close(fd)


def _put_back(image: Path, saved: list[tuple[int, bytes]]) -> None:
    fd = os.open(image, os.O_WRONLY)
    try:
        for off, data in saved:
            os.pwrite(fd, data, off)
    finally:
        os.close(fd)


def _covered(w: tuple[int, int], ranges: list[tuple[int, int]], starts: list[int]) -> bool:
    """Whether the write ``w`` lies inside one of the (sorted, merged) saved ranges."""
    start, n = w
    i = bisect.bisect_right(starts, start) - 1
    return n <= 0 or (i >= 0 and start + n <= ranges[i][0] + ranges[i][1])


def _undo_file(scratch: Path) -> Path:
    """A name no other check running now uses (workers may share a scratch directory)."""
    name = f"crashlab-{os.getpid()}-{threading.get_ident()}.e2undo"
    if UNDO_DIR.is_dir() and os.access(UNDO_DIR, os.W_OK | os.X_OK):
        return UNDO_DIR / name
    return scratch / name


def _undo(undo: Path, image: Path) -> None:
    # In this process when the file is one e2undo.restore fully understands (always, so
    # far); e2undo itself otherwise, whose refusal is a harness error. The file goes
    # either way: /dev/shm had kept 2,040 of them (memory) from checks that raised here.
    try:
        if e2undo.keys(undo) and e2undo.restore(undo, image) is None:
            proc.run(["e2undo", undo, image])
    finally:
        undo.unlink(missing_ok=True)
