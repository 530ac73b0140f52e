"""ACE's index space walked (stdlib only: the host and the guest import it): which
indices are workloads (``valid``), which a run takes (``selection``, ``shuffled``) and
how many there are (``count``).

Op families (``families.py``: relog, reuse-name, dir-move, held-fd, data-ns-mix,
new-dir-name) are the parts of seq-2 and seq-3 where the fsync bugs of the last years
live; ``count`` counts each exactly (``python3 -m harness.guest.ace count --seq 3
--grammar ace-x``) by dynamic programming over the walk the family and ``valid`` share,
which tests check against decoding every index of seq-2.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Iterator, Sequence
from typing import Any

from . import families
from .ace import BASE_DIRS, BASE_SIZE, FILES, Core, decode, space, units
from .ops import parent


def valid(picked: Sequence[tuple[Core, tuple[str, str]]]) -> bool:
    """Whether every op finds what it needs: the names it reads exist, the names it
    makes do not, rmdir's directory is empty, an mmap write lies inside its file."""
    files = {f: BASE_SIZE for f in FILES}
    dirs = {"", *BASE_DIRS}
    return all(_step_persist(c, pkind, ppath, files, dirs) for c, (pkind, ppath) in picked)


def _step_persist(c: Core, pkind: str, ppath: str, files: dict[str, int], dirs: set[str]) -> bool:
    """``_step``, then whether the persistence op finds its name."""
    if not _step(c, files, dirs):
        return False
    if pkind in ("fsync", "fdatasync") and files.get(ppath, -1) < 0:  # gone, or a link
        return False
    return not (pkind == "fsync_dir" and ppath not in dirs)


def _step(c: Core, files: dict[str, int], dirs: set[str]) -> bool:
    """Apply ``c`` to the names (file -> size; a symbolic link's size is -1)."""
    k = c.kind
    if k in ("create", "mkdir", "symlink", "tmpfile-link"):
        if c.path in files or c.path in dirs or parent(c.path) not in dirs:
            return False
        if k == "mkdir":
            dirs.add(c.path)
        else:
            files[c.path] = {"create": 0, "symlink": -1}.get(k, c.length)
        return True
    if k in ("rmdir", "rmdir-held"):
        pre = c.path + "/"
        busy = any(x.startswith(pre) for x in (*files, *dirs))
        if c.path not in dirs or busy:
            return False
        dirs.discard(c.path)
        return True
    if k == "rename" and c.path in dirs:
        if c.dst in dirs or c.dst in files or parent(c.dst) not in dirs:
            return False
        pre = c.path + "/"
        for d in [d for d in dirs if d == c.path or d.startswith(pre)]:
            dirs.discard(d)
            dirs.add(c.dst + d[len(c.path) :])
        for f in [f for f in files if f.startswith(pre)]:
            files[c.dst + f[len(c.path) :]] = files.pop(f)
        return True
    if c.path not in files:
        return False
    if k == "exchange":
        if c.dst not in files:
            return False
        files[c.path], files[c.dst] = files[c.dst], files[c.path]
        return True
    if k == "rename_noreplace" and c.dst in files:
        return False
    if k in ("link", "rename", "rename_noreplace"):
        over = k == "rename" and c.dst in files
        if (c.dst in files and not over) or c.dst in dirs or parent(c.dst) not in dirs:
            return False
        files[c.dst] = files[c.path]
        if k != "link":
            del files[c.path]
        return True
    size = files[c.path]
    if k in ("unlink", "unlink-held"):
        del files[c.path]
    elif size < 0:  # a symbolic link: any other op would follow it
        return False
    elif k == "mwrite":
        return c.offset + c.length <= size
    elif k in ("append", "overwrite", "write", "dwrite"):
        files[c.path] = max(size, c.offset + c.length)
    elif k == "truncate":
        files[c.path] = c.size
    elif k == "falloc" and c.mode in ("default", "zero_range"):
        files[c.path] = max(size, c.offset + c.size)
    return True


def selection(
    seq: int,
    sample: int,
    seed: int,
    limit: int = 0,
    classes: Sequence[str] = (),
    indices: Sequence[int] = (),
    relog: bool = False,
    grammar: str = "ace",
    family: str = "",
) -> list[int]:
    """The valid indices a run takes: all of them in order, or ``sample`` of them drawn
    by ``seed`` (sorted); only those whose core ops are all of ``classes`` when given
    (the sample is drawn among those); ``limit`` keeps the first few (a CI slice).
    ``indices`` replaces the whole space by these workloads (the filters still apply);
    ``relog`` keeps only workloads that act again on a file they fsync'd (``relogs``);
    ``family`` only those of that op family (``families.py``)."""
    keep = set(classes)
    if relog:
        family = family or "relog"

    def wanted(i: int) -> bool:
        picked = decode(seq, i, grammar)
        return (
            valid(picked)
            and (not keep or all(c.op_class in keep for c, _ in picked))
            and (not family or families.matches(family, picked))
        )

    if indices:
        chosen = sorted({i for i in indices if wanted(i)})
        if sample:
            chosen = sorted(random.Random(seed).sample(chosen, min(sample, len(chosen))))
        return chosen[:limit] if limit else chosen
    if sample:
        rng = random.Random(seed)
        total = space(seq, grammar)
        if sample > total:
            raise ValueError(f"a sample of {sample} is larger than seq-{seq}'s {total} workloads")
        out: set[int] = set()
        tries = 0
        # Rejection sampling over the whole space: a narrow class filter on seq-3 accepts
        # about one index in a few thousand, still seconds for a few thousand workloads.
        while len(out) < sample and tries < 5000 * sample:
            tries += 1
            i = rng.randrange(total)
            if i not in out and wanted(i):
                out.add(i)
        picked = sorted(out)
    else:
        picked = [i for i in range(space(seq, grammar)) if wanted(i)]
    return picked[:limit] if limit else picked


def relogs(picked: Sequence[tuple[Core, tuple[str, str]]]) -> bool:
    """Whether a core op acts on a file an earlier op's fsync or fdatasync persisted with
    no sync between (the ``relog`` family: its inode is in the running transaction's log,
    btrfs's log tree or ext4's fast commit)."""
    return bool(families.matches("relog", picked))


def _affine(seq: int, seed: int, grammar: str) -> tuple[int, int, int]:
    """``shuffled``'s permutation of the index space: (size, stride coprime with it,
    offset), the k-th index of the order being ``(offset + k * stride) % size``."""
    total = space(seq, grammar)
    rng = random.Random(seed)
    stride = rng.randrange(1, total) if total > 1 else 1
    while math.gcd(stride, total) != 1:
        stride += 1
    return total, stride, rng.randrange(total)


def shuffled(seq: int, seed: int, grammar: str = "ace", family: str = "") -> Iterator[int]:
    """Every valid workload of ``family`` (all when empty) once, in an order fixed by
    ``seed``: an affine permutation of the index space (a stride coprime with its size),
    so a budgeted run taken up again walks the same order and skips what it recorded."""
    total, stride, offset = _affine(seq, seed, grammar)
    for k in range(total):
        i = (offset + k * stride) % total
        picked = decode(seq, i, grammar)
        if valid(picked) and (not family or families.matches(family, picked)):
            yield i


def ordered(seq: int, seed: int, grammar: str = "ace", family: str = "") -> list[int]:
    """``shuffled``'s order, whole: the family's ``members`` sorted by their place in the
    permutation (its inverse), not found by walking the index space -- a seq-3 family's
    last workload lies tens of millions of indices in."""
    total, stride, offset = _affine(seq, seed, grammar)
    back = pow(stride, -1, total)  # k = (i - offset) / stride, mod total
    return sorted(members(seq, grammar, family), key=lambda i: (i - offset) * back % total)


Names = tuple[tuple[tuple[str, int], ...], frozenset[str]]  # files with sizes, dirs


def _names(files: dict[str, int], dirs: set[str]) -> Names:
    return tuple(sorted(files.items())), frozenset(dirs)


BASE: Names = _names({f: BASE_SIZE for f in FILES}, {"", *BASE_DIRS})


def _children(
    state: Names, walk: Any, last: bool, grammar: str
) -> Iterator[tuple[int, Names, Any]]:
    """Each op that can follow a prefix: its digit, the names and the walk after it."""
    for digit, (c, (pkind, ppath)) in enumerate(units(last, grammar)):
        files, dirs = dict(state[0]), set(state[1])
        if _step_persist(c, pkind, ppath, files, dirs):
            nxt = families.advance(walk, c, pkind, ppath) if walk is not None else None
            yield digit, _names(files, dirs), nxt


@functools.cache
def _completions(state: Names, walk: Any, left: int, grammar: str) -> int:
    """How many ways ``left`` more ops complete a prefix into a valid workload (of the
    walk's family, when there is one)."""
    if left == 0:
        return 1 if walk is None or walk.hit else 0
    return sum(
        _completions(s, w, left - 1, grammar)
        for _, s, w in _children(state, walk, left == 1, grammar)
    )


def count(seq: int, grammar: str = "ace", family: str = "") -> int:
    """Exactly how many valid workloads of ``seq`` ops (of ``family`` when given) there
    are, by dynamic programming: the names left and the family's walk after a prefix are
    all its suffixes depend on, and few prefixes differ in them."""
    return _completions(BASE, families.start(family) if family else None, seq, grammar)


def members(seq: int, grammar: str = "ace", family: str = "") -> Iterator[int]:
    """Every valid workload of ``family`` (all when empty), in index order, found by a
    walk that enters only prefixes ``_completions`` says some workload completes: its
    cost grows with the family's size, not with the index space's."""
    radix = [len(units(True, grammar)), len(units(False, grammar))]

    @functools.cache  # many prefixes leave the same names and walk: their suffixes agree
    def kids(state: Names, walk: Any, left: int) -> tuple[tuple[int, Names, Any], ...]:
        every = _children(state, walk, left == 1, grammar)
        return tuple(k for k in every if _completions(k[1], k[2], left - 1, grammar))

    def below(state: Names, walk: Any, left: int, index: int) -> Iterator[int]:
        if left == 0:
            yield index
            return
        for digit, s, w in kids(state, walk, left):
            yield from below(s, w, left - 1, index * radix[left > 1] + digit)

    yield from below(BASE, families.start(family) if family else None, seq, 0)
