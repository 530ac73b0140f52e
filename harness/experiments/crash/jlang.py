"""``scenario import jlang FILE``: a CrashMonkey j-lang workload (the format ACE emits and
CrashMonkey's ``ace/cmAdapter.py`` compiles to C++) as a crash scenario whose workload is
a workload file (``harness/model/opfile.py``), judged at its persistence points.

The semantics are cmAdapter's, the code CrashMonkey ran (each op: ``jlangops.py``):

* ``# define`` lists paths under the mount point; a line names one by its path without
  the slashes (``A/C/foo`` is ``ACfoo``; older hand-written files use the last component,
  ``foo`` for ``A/foo``), and ``test`` is the mount point itself. ``# declare`` declares C
  variables (ignored). ``# setup`` runs before CrashMonkey records, and the disk is then
  unmounted: here its ops are followed by a ``sync`` and the crash states start after it
  (``crash.after_mark``). ``# run`` is the recorded workload.
* ``open X FLAGS MODE`` / ``opendir X MODE`` keep descriptor ``fd_X``; ``write``,
  ``falloc``, ``fsync``, ``fdatasync``, ``fsetxattr``, ``mmapwrite`` and ``close`` go
  through it, every other op through the path. A descriptor's op becomes the op on the
  name it was opened by (followed through renames): the same inode and dentry. Where that
  name is removed while the file is open (unlink, remove, rmdir, a rename over it), the
  descriptor is held (``open FD PATH``): it keeps the inode alive as CrashMonkey's does,
  and the ops after the removal go through it (``write_fd``, ``fsync_fd``,
  ``fdatasync_fd``).
* Modes: CrashMonkey's harness runs under umask 022 (``open``/``mkdir`` with 0777 make
  0755); the lab's create makes 0644 and mkdir 0755, so a differing mode gets a ``chmod``.
* ``checkpoint N`` is where CrashMonkey checks a crash state; the lab checks one at every
  persistence point, so each checkpoint must follow one (else the import is refused).

Approximations (each also in the scenario's header): ``dwrite`` (O_DIRECT|O_SYNC) is the
lab's ``dwrite_dsync`` (O_DIRECT with RWF_DSYNC: the data and size, not the rest of the
inode); ``mmapwrite`` (fallocate, store through a shared map, msync of 8 KiB) is
``falloc default`` + ``mwrite`` (msync of the whole map) + ``fdatasync``; a symbolic
link's target is the relative path to the same name (CrashMonkey's is absolute, into its
own mount point); data bytes are drawn per line, not CrashMonkey's text pattern. Not
noted per file: each of the lab's path ops opens and closes the file, so the flush a
close starts after a truncate to 0 (ext4's auto_da_alloc, btrfs' flush-on-close) comes
at that op's close rather than at the j-lang ``close``.

Refused with file, line and op (exit 2): ``mknod``, J2-Lang templates, ``falloc ...
addToSetup``, open flags other than O_RDONLY/O_WRONLY/O_RDWR/O_CREAT/O_EXCL/O_TRUNC,
fdatasync of a directory, ``falloc``/``fsetxattr``/``mmapwrite`` through a descriptor
whose name was removed (the lab has them on names only), a checkpoint after no
persistence point, and any op the lab's format cannot take (``opfile.parse``: e.g. a
rename onto an existing directory).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.crash import DEFAULT_DISK, MIN_DISK, FsType
from harness.config.settings import size_text
from harness.errors import InputError
from harness.experiments.crash.jlangops import Convert, JlangError, Line
from harness.model import opfile

FS_DEFAULT = "btrfs"  # j-lang names no filesystem; most of CrashMonkey's bugs are btrfs'
APPROXIMATIONS = {
    "dwrite": "dwrite (O_DIRECT|O_SYNC) runs as dwrite_dsync (O_DIRECT + RWF_DSYNC): the "
    "oracle holds it to fdatasync's promise, not O_SYNC's whole inode",
    "mmapwrite": "mmapwrite runs as falloc default + mwrite + fdatasync (CrashMonkey msyncs "
    "8 KiB at the offset; the lab's mwrite msyncs the whole map)",
    "symlink": "symlink targets are relative paths to the same name (CrashMonkey's are "
    "absolute, into its own mount point)",
    "setup": "after # setup CrashMonkey unmounts and remounts (a cold cache); here a sync",
}


@dataclass
class Converted:
    text: str  # the workload file
    setup_marks: int  # persistence points up to the end of # setup (and its sync)
    checkpoints: list[tuple[int, int]]  # (j-lang line, the lab's persistence points by then)
    notes: list[str]


def read(src: str, text: str) -> tuple[dict[str, str], list[Line]]:
    """The names ``# define`` gives and the lines of ``# setup`` and ``# run``."""
    if text.lstrip().startswith("# J2-Lang"):
        raise JlangError(
            src,
            1,
            "",
            "a J2-Lang template (a family of workloads)",
            "import the j-lang files ACE generates from it",
        )
    section, paths, lines = "", [], []
    for n, raw in enumerate(text.splitlines(), 1):
        words = raw.split()
        if not words:
            continue
        if words[0] == "#":
            section = words[-1] if len(words) > 1 else ""
            continue
        if section == "define":
            paths.append((n, raw.strip()))
        elif section in ("setup", "run"):
            lines.append(Line(n, section, words, raw.strip()))
        elif section != "declare":
            raise JlangError(
                src,
                n,
                words[0],
                f"outside a section ({section or 'none'})",
                "sections: # define, # declare, # setup, # run",
            )
    return _names(src, paths), lines


def _names(src: str, paths: list[tuple[int, str]]) -> dict[str, str]:
    names: dict[str, str] = {"test": ""}
    last: dict[str, list[str]] = {}
    for n, p in paths:
        norm = os.path.normpath(p)
        if p == "test":
            continue
        if p.startswith("/") or norm.startswith(".."):
            raise JlangError(src, n, p, "a defined path leaves the mount point")
        names.setdefault(norm.replace("/", ""), norm)
        last.setdefault(os.path.basename(norm), []).append(norm)
    for base, ps in last.items():  # older files name a path by its last component
        if len(ps) == 1:
            names.setdefault(base, ps[0])
    return names


def _run(src: str, names: dict[str, str], lines: list[Line], hold: set[int]) -> Convert:
    c = Convert(src, names, hold)
    setup = [ln for ln in lines if ln.section == "setup"]
    for ln in setup:
        c.step(ln)
    if setup:  # CrashMonkey unmounts after setup: all of it durable before the run
        end = "end of # setup: CrashMonkey unmounts here"
        c.emit(Line(setup[-1].n, "setup", ["sync"], end), "sync")
    c.setup_marks = c.persist
    for ln in lines:
        if ln.section == "run":
            c.step(ln)
    return c


def convert(src: str, text: str, fs: str = FS_DEFAULT) -> Converted:
    """The j-lang ``text`` (from file ``src``) as a workload file, checked by
    ``opfile.parse`` for ``fs``.

    :raise JlangError: a line the lab cannot run as CrashMonkey would, named.
    """
    names, lines = read(src, text)
    if not any(ln.section == "run" for ln in lines):
        raise JlangError(src, 0, "", "no ops in # run")
    c = _run(src, names, lines, set())
    if c.needs:  # descriptors whose name goes while open: hold them from their open
        c = _run(src, names, lines, c.needs)
    by_line: dict[int, Line] = {}
    body: list[str] = []
    prev: Line | None = None
    for ln, op in c.out:
        if ln is not prev:
            body.append(f"# {src}:{ln.n}: {ln.text}")
            prev = ln
        body.append(op)
        by_line[len(body)] = ln
    wf = "\n".join(body) + "\n"
    try:
        opfile.parse(wf, fs)
    except opfile.OpFileError as e:
        bad = by_line.get(e.line)
        n, op = (bad.n, bad.op) if bad else (0, e.op)
        said = e.message if e.op == op else f"(as the lab's {e.op}) {e.message}"
        raise JlangError(src, n, op, said, e.hint) from None
    notes = [v for k, v in APPROXIMATIONS.items() if k in c.used]
    if c.setup_marks:
        notes.append(APPROXIMATIONS["setup"])
    return Converted(wf, c.setup_marks, c.checkpoints, notes)


def scenario_data(path: Path, fs: str | None) -> dict[str, Any]:
    """The crash scenario of j-lang file ``path`` (``_notes``: its approximations)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}", hint="a CrashMonkey j-lang file") from None
    fs = fs or FS_DEFAULT
    if fs not in FsType.__members__.values():
        close = difflib.get_close_matches(fs, list(FsType), n=1)
        raise InputError(
            f"--fs {fs}: not a filesystem the lab runs",
            hint=f"did you mean {close[0]}?" if close else ", ".join(FsType),
        )
    conv = convert(str(path), text, fs)
    crash: dict[str, Any] = {"states": [{"kind": "mark"}]}
    if conv.setup_marks:
        crash["after_mark"] = f"crashlab:sync:{conv.setup_marks}"
    return {
        "description": f"CrashMonkey j-lang workload {path.name}, judged at every "
        f"persistence point ({len(conv.checkpoints)} j-lang checkpoint(s))",
        "fs": {"type": fs, "disk_size": size_text(max(DEFAULT_DISK, MIN_DISK[FsType(fs)]))},
        "workload": {"type": "file", "text": conv.text},
        "crash": crash,
        "_notes": conv.notes,
    }
