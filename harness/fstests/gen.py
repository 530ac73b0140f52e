"""A finding's minimal workload as an fstests test in fstests' own style, and its golden
``.out``: what the lab's oracle (``harness/model/oracle/``) requires at the crash point.

The ops are spelt with ``xfs_io``, coreutils and fstests' own helpers (``src/renameat2``,
``$BTRFS_UTIL_PROG``), each op as the lab's workload did it; an op with no such
spelling is refused by name (:class:`NoSpelling`). The bytes are ``xfs_io``'s fill
pattern (0xcd): the oracle's model is run again over the same ops with those bytes, so
the ``.out``'s md5sums are the model's, not a second expectation.

Two shapes, by what the finding's state is:

* a cut exactly at a persistence point (the lab's ``mark`` states): dm-flakey,
  ``_flakey_drop_and_remount`` right after the op, and the ``.out`` is what the oracle
  requires of a state cut exactly there (generic/789's shape);
* any other state (a cut between two flushes, dropped or reordered writes, a torn
  write): dm-log-writes, a mark after the op, then every FUA from that mark to the end
  of the log replayed and mounted in turn (generic/482's loop), each judged by what the
  oracle requires anywhere in the interval after the mark. replay-log cannot reorder or
  tear writes: such a finding's test checks the cuts a real device can make, and its
  proof says whether they are enough.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shlex
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.model import shell
from harness.model.ops import FALLOC_XFS_IO, PERSIST_OPS, SPECS, Op
from harness.model.oracle import Tracker, requirements
from harness.model.shell import PATTERN, NoSpelling

GROUPS = "auto quick log metadata"  # the _begin_fstest groups of every generated test
FS_DIRS = ("btrfs", "ext4", "xfs")


@dataclass(frozen=True)
class Test:
    dir: str  # "generic", "btrfs", "ext4" or "xfs"
    text: str  # the test program
    out: str  # its golden output (without the "QA output created by" line's name)
    shape: str  # "flakey" or "log-writes"

    def golden(self, name: str) -> str:
        return f"QA output created by {name}\n{self.out}"


@dataclass(frozen=True)
class Finding:
    """What the header says of the finding the test was made from."""

    fs: str
    state_id: str
    run_id: str
    symptom: str
    kernel: str
    rule: str  # the oracle's promise broken, with its source
    mkfs_options: tuple[str, ...] = ()  # the run's, beyond the filesystem's defaults
    mount_options: tuple[str, ...] = ()
    journaled: bool = True  # else no _require_metadata_journaling (ext2, ext4 without one)


def fill(op: Any) -> Any:
    """``op`` writing xfs_io's pattern instead of the generator's bytes (an xattr keeps its
    value: the test sets it as given)."""
    if op.kind == "setxattr" or not op.data:
        return op
    return dataclasses.replace(op, data=bytes([PATTERN]) * len(op.data))


def expectation(
    ops: Sequence[Any], fsync_names: bool, ordered: bool, exact: bool
) -> tuple[dict[str, Any], dict[str, str]]:
    """The oracle's requirements at the last persistence op of ``ops`` (cut exactly there
    or anywhere in the interval after it) and the md5sum of each required content, by
    its sha256: the model's bytes at the end, which are those of the last mark."""
    track = Tracker(fsync_names, ordered)
    last = None
    for i, op in enumerate(ops):
        track.before(op)
        track.after(op)
        if op.kind in PERSIST_OPS:
            last = track.next_mark()
            track.mark(last, i)
    if last is None:
        raise NoSpelling("the workload has no persistence op: there is no crash point")
    oracle = {"marks": track.marks(), "final_mark": None}
    req = requirements(oracle, last, exact)
    assert req is not None
    md5 = {i.sha256(): hashlib.md5(bytes(i.data)).hexdigest() for i in track.model.files.values()}
    return req, md5


def where(ops: Sequence[Op], fs: str) -> str:
    """tests/generic unless an op is one filesystem's (the table's ``fs`` names one)."""
    own = {SPECS[o.kind].fs[0] for o in ops if len(SPECS[o.kind].fs) == 1}
    return own.pop() if len(own) == 1 and fs in FS_DIRS else "generic"


def _p(rel: str) -> str:
    return shell.at(shell.FSTESTS, rel)


def spell(op: Op) -> str:
    """One op as a shell line of the test."""
    return shell.spell(op, shell.FSTESTS)


def _requires(ops: Sequence[Op], shape: str) -> list[str]:
    out = ["_require_scratch"]
    out.append("_require_dm_target flakey" if shape == "flakey" else "_require_log_writes")
    falloc = {FALLOC_XFS_IO.get(o.mode, "falloc").split()[0] for o in ops if o.kind == "falloc"}
    lines = [line for o in ops for line in SPECS[o.kind].requires]
    lines += [f"_require_xfs_io_command {c}" for c in sorted(falloc)]
    return out + list(dict.fromkeys(lines))


def _checks(req: dict[str, Any], md5: dict[str, str]) -> tuple[list[str], list[str]]:
    """The test's lines that print what must survive, and the lines they print."""
    prog: list[str] = []
    out: list[str] = []
    for d in req["dirs"]:
        prog.append(f'stat -c "%n %F" {_p(d)} | _filter_scratch')
        out.append(f"SCRATCH_MNT/{d} directory")
    for path, want in sorted(req["files"].items()):
        if "symlink" in want:
            prog.append(f'echo "{path} -> $(readlink {_p(path)})"')
            out.append(f"{path} -> {want['symlink']}")
            continue
        fmt = "%n size %s" + (" links %h" if "nlink" in want else "")
        fmt += " mode %a" if "mode" in want else ""
        fmt += " owner %u:%g" if "owner" in want else ""
        prog.append(f'stat -c "{fmt}" {_p(path)} | _filter_scratch')
        line = f"SCRATCH_MNT/{path} size {want['size']}"
        line += f" links {want['nlink']}" if "nlink" in want else ""
        line += f" mode {want['mode']:o}" if "mode" in want else ""
        line += " owner {}:{}".format(*want["owner"]) if "owner" in want else ""
        out.append(line)
        prog.append(f"md5sum {_p(path)} | _filter_scratch")
        out.append(f"{md5[want['sha256']]}  SCRATCH_MNT/{path}")
        for name, value in sorted(want.get("xattrs", {}).items()):
            prog.append(
                f"$GETFATTR_PROG --absolute-names -n {shlex.quote(name)} -e hex {_p(path)}"
                " | _filter_scratch"
            )
            out += [f"# file: SCRATCH_MNT/{path}", f"{name}=0x{value}", ""]
    for name in req["absent"]:
        prog.append(f'[ -e {_p(name)} -o -L {_p(name)} ] && echo "{name} exists, must be gone"')
    for name in req.get("named", []):  # a log flush's name: the file, whatever it holds
        prog.append(f'[ -f {_p(name)} ] || echo "{name} is missing"')
    return prog, out


def _header(f: Finding, ops: Sequence[Any], shape: str) -> list[str]:
    how = (
        "a power failure right after the last persistence op (dm-flakey)"
        if shape == "flakey"
        else "every cut at a FUA from the mark after the last persistence op to the end of "
        "the log (dm-log-writes, as generic/482)"
    )
    about = [
        f"Generated by crashlab from finding {f.state_id} (run {f.run_id}), {f.fs} on "
        f"{f.kernel}: {f.symptom}.",
        f"The promise broken: {f.rule}.",
        f"{len(ops)} ops, then {how}; the .out is what the lab's oracle requires to survive "
        "(names, sizes, md5sums of xfs_io's 0xcd pattern).",
    ]
    text = [line for para in about for line in [*textwrap.wrap(para, 77), ""]][:-1]
    return [
        "#! /bin/bash",
        "# SPDX-License-Identifier: GPL-2.0",
        "#",
        "# FS QA Test No. crashlab-NNN",
        "#",
        *(f"# {line}".rstrip() for line in text),
        "#",
        ". ./common/preamble",
    ]


def _fixed(fs: str) -> list[str]:
    return [
        "# Fill in the fix's commit and title once it is known.",
        f'_fixed_by_kernel_commit xxxxxxxxxxxx \\\n\t"{fs}: <title of the fix>"',
        "",
    ]


def _flakey(
    mkfs: str, journaled: bool, lines: list[str], held: list[str], check_prog: list[str]
) -> list[str]:
    """generic/789's shape: the ops, dm-flakey drops what follows, remount, check."""
    return [
        f"_scratch_mkfs {mkfs}".rstrip() + ' >> $seqres.full 2>&1 || _fail "mkfs failed"',
        *(["_require_metadata_journaling $SCRATCH_DEV"] if journaled else []),
        "_init_flakey",
        "_scratch_mount",
        "",
        *lines,
        "",
        "# Simulate a power failure right after the last persistence op returned,",
        "# then mount again: the filesystem's journal or log replay.",
        # The held descriptors close once writes are dropped (the lab's guest held them
        # to the crash) and before the unmount, which an open file would keep busy.
        *(["_load_flakey_table $FLAKEY_DROP_WRITES"] if held else []),
        *(f"exec {{{h}}}<&-" for h in held),
        "_flakey_drop_and_remount",
        "",
        "# What must be there (the oracle's requirements at that point):",
        *check_prog,
    ]


def _log_writes(
    mkfs: str, journaled: bool, lines: list[str], held: list[str], check_prog: list[str]
) -> list[str]:
    """generic/482's shape: the ops logged, a mark after them, then the state at the mark
    and at every FUA after it replayed and checked; the first state's lines are the
    golden ones, each later one must print the same."""
    return [
        "_log_writes_init $SCRATCH_DEV",
        f"_log_writes_mkfs {mkfs}".rstrip() + " >> $seqres.full 2>&1",
        "_log_writes_mount",
        "",
        *lines,
        "_log_writes_mark crashlab",
        *(f"exec {{{h}}}<&-" for h in held),
        "_log_writes_unmount",
        "_log_writes_remove",
        "",
        "# Every FUA from the mark on, as generic/482 replays them: the oracle's",
        "# requirements hold at each (anywhere after the last persistence op).",
        "check_state()",
        "{",
        "\t_scratch_mount",
        *("\t" + c for c in check_prog),
        "\t_scratch_unmount",
        '\t_check_scratch_fs 2>&1 | grep -v "^_check" >> $seqres.full',
        "}",
        "",
        "_log_writes_replay_log crashlab $SCRATCH_DEV",
        "check_state | tee $tmp.first",
        "cur=$(_log_writes_find_next_fua $(_log_writes_mark_to_entry_number crashlab))",
        'while [ -n "$cur" ]; do',
        "\t_log_writes_replay_log_range $cur $SCRATCH_DEV >> $seqres.full",
        "\tcheck_state > $tmp.state",
        "\tdiff -u $tmp.first $tmp.state >> $seqres.full || {",
        '\t\techo "entry $cur differs, see $seqres.full"; break; }',
        "\tcur=$(_log_writes_find_next_fua $((cur + 1)))",
        "done",
    ]


def generate(
    ops: Sequence[Any], finding: Finding, *, fsync_names: bool, ordered: bool, flakey: bool
) -> Test:
    """The test of ``ops`` (the minimal workload, its last persistence op the crash
    point, each op with the generator's bytes: ``fill`` puts xfs_io's pattern in)."""
    ops = [fill(o) for o in ops]
    lines = [spell(o) for o in ops]  # NoSpelling before anything else
    shape = "flakey" if flakey else "log-writes"
    req, md5 = expectation(ops, fsync_names, ordered, exact=flakey)
    check_prog, out = _checks(req, md5)
    held = sorted({shell.fd_var(o.fd) for o in ops if o.fd})
    body = [*_header(finding, ops, shape), f"_begin_fstest {GROUPS}", ""]
    cleanup = "_cleanup_flakey" if flakey else "_log_writes_cleanup &> /dev/null"
    body += ["_cleanup()", "{", f"\t{cleanup}", "\tcd /", "\trm -r -f $tmp.*", "}", ""]
    body += [". ./common/filter", ". ./common/dmflakey" if flakey else ". ./common/dmlogwrites"]
    if any(SPECS[o.kind].syscall.startswith("renameat2") for o in ops):
        body.append(". ./common/renameat2")  # _require_renameat2 is defined there
    body += ["", *_requires(ops, shape), "", *_fixed(finding.fs)]
    mkfs = " ".join(shlex.quote(o) for o in finding.mkfs_options)
    if finding.mount_options:
        opts = shlex.quote(",".join(finding.mount_options))
        body += [
            "# The run's mount options (every mount, the remount's too).",
            f'export MOUNT_OPTIONS="$MOUNT_OPTIONS -o {opts}"',
            "",
        ]
    steps = _flakey if flakey else _log_writes
    body += steps(mkfs, finding.journaled, lines, held, check_prog)
    body += ["", "# success, all done", "_exit 0", ""]
    return Test(
        where(ops, finding.fs), "\n".join(body), "\n".join(out) + ("\n" if out else ""), shape
    )
