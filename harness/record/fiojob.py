"""A fio job made judgeable by data: split into sections, each durable at its own mark.

The scenario's job (one job section, writes only) is rewritten as ``sections`` jobs run
one after the other (``stonewall``), each writing its own slice of one file with fio's
verify headers (``verify=md5``: every block carries magic, its own offset and an md5 of
its data), ending in fsync (``end_fsync=1``) and then, through ``exec_postrun``, placing
mark ``crashlab:sync:<k>`` in the log -- after the fsync returned, since fio runs the
post-run command once the job's I/O, end fsync included, is done. So at and after mark k
every block of sections 1..k must verify (``harness/guest/fioverify.py``, rule 12 of
docs/verdicts.md).

Why only these options: the oracle needs every block of a section written exactly once
(fio's random map without ``norandommap``, one loop, no time limit, one job, one block
size), so a required block has one right content. Options that could change that are
refused as bad input rather than guessed at.
"""

from __future__ import annotations

import configparser
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError
from harness.guest import oracle as guest_oracle

FORMAT = guest_oracle.FORMAT
DEFAULT_FILE = "fio.data"
WRITES = ("write", "randwrite")
# What a judged job may say: none of these can make a block be written twice or not at
# all. Anything else (offset, numjobs, loops, runtime, norandommap, verify ...) is refused.
ALLOWED = frozenset(
    {
        "ioengine", "bs", "blocksize", "size", "rw", "readwrite", "fsync", "fdatasync",
        "randseed", "randrepeat", "direct", "buffered", "iodepth", "filename", "fallocate",
        "sync", "end_fsync", "thread", "group_reporting", "name", "description",
    }
)  # fmt: skip
_SIZE = re.compile(r"^(\d+)\s*([kmgt]?)(i?b)?$", re.IGNORECASE)


class JobError(ValueError):
    """The job cannot be judged by data; the message names the option."""


@dataclass(frozen=True)
class SectionedJob:
    options: dict[str, str | None]  # the one job's options, [global] merged in
    name: str  # the job section's name
    filename: str
    bs: int
    size: int  # of all sections together
    sections: int

    @property
    def part(self) -> int:
        return self.size // self.sections


def parse_size(text: str) -> int:
    """fio's sizes (``4k``, ``16m``, ``1GiB``; base 1024, fio's default ``kb_base``)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise JobError(f"size {text!r} is not an absolute size (like 4k or 16m)")
    return int(m.group(1)) << (10 * " kmgt".index(m.group(2).lower() or " "))


def parse(job: str, sections: int) -> SectionedJob:
    """The job, checked for what the block oracle needs.

    :raise JobError: an option the oracle cannot judge, named, with the rule it breaks.
    """
    cp = configparser.ConfigParser(allow_no_value=True, interpolation=None, strict=False)
    try:
        cp.read_string(job)
    except configparser.Error as e:
        raise JobError(f"not a fio job file: {e}") from None
    names = [s for s in cp.sections() if s != "global"]
    if len(names) != 1:
        raise JobError(f"judged by data, a job has exactly one job section, not {names}")
    opts: dict[str, str | None] = {
        **(dict(cp["global"]) if cp.has_section("global") else {}),
        **dict(cp[names[0]]),
    }
    refused = sorted(set(opts) - ALLOWED)
    if refused:
        raise JobError(
            f"option(s) {refused} may leave a block written twice or not at all; "
            f"allowed: {sorted(ALLOWED)}"
        )
    rw = opts.get("rw") or opts.get("readwrite") or "read"
    if rw not in WRITES:
        raise JobError(f"rw={rw}: only {list(WRITES)} write each block once")
    bs = parse_size(opts.get("bs") or opts.get("blocksize") or "4k")
    size = parse_size(opts.get("size") or "")
    filename = opts.get("filename") or DEFAULT_FILE
    if any(c in filename for c in ":/"):
        raise JobError(f"filename={filename}: one plain file name in the job's directory")
    if bs < 512 or size % (sections * bs):
        raise JobError(f"size={size} must split into {sections} sections of whole {bs}-byte blocks")
    return SectionedJob(opts, names[0], filename, bs, size, sections)


def mark_text(k: int) -> str:
    return f"crashlab:sync:{k}"


def render(job: SectionedJob, mark_argv: Sequence[str] | None) -> str:
    """The sectioned job file. ``mark_argv``: the command that places a mark (the mark's
    text is appended), or None when the recorder cannot mark from inside the workload --
    then only the final sync's mark requires anything."""
    common = {
        **{k: v for k, v in job.options.items() if k not in ("size", "filename", "name")},
        "filename": job.filename,
        "size": str(job.part),
        "verify": "md5",
        "do_verify": "0",  # the lab verifies the crash states, not the running job
        "end_fsync": "1",
    }
    lines = ["[global]", *(_line(k, v) for k, v in common.items())]
    for k in range(1, job.sections + 1):
        lines += ["", f"[{job.name}-{k}]", f"offset={(k - 1) * job.part}", "stonewall"]
        if mark_argv is not None:
            lines.append("exec_postrun=" + shlex.join([*mark_argv, mark_text(k)]))
    return "\n".join(lines) + "\n"


def _line(key: str, value: str | None) -> str:
    return key if value is None else f"{key}={value}"


def oracle(job: SectionedJob, *, marked: bool, fsync_names: bool) -> dict[str, Any]:
    """What checkstate.py hands to ``fioverify.verify``: the file's layout, which marks
    require how many sections, and the final sync's mark (all of them)."""
    marks = [{"mark": mark_text(k), "sections": k} for k in range(1, job.sections + 1)]
    final = mark_text(job.sections + 1)
    return {
        "format": FORMAT,
        "fio": {
            "file": job.filename,
            "bs": job.bs,
            "section_size": job.part,
            "sections": job.sections,
            "verify": "md5",
            "fsync_names": fsync_names,
        },
        "marks": [*(marks if marked else []), {"mark": final, "sections": job.sections}],
        "final_mark": final,
    }


def check_marks(found: Sequence[str], oracle: dict[str, Any]) -> None:
    """fio ignores its ``exec_postrun`` command's exit status: a mark missing from the log
    would make its states require nothing (or too little), so it is the lab's failure.

    :raise HarnessError: a mark the oracle counts on is not in the log.
    """
    missing = [m["mark"] for m in oracle["marks"] if m["mark"] not in found]
    if missing:
        raise HarnessError(
            f"the recorded log lacks the fio section marks {missing}",
            detail="fio's exec_postrun (dmsetup message ... mark) did not place them",
        )
