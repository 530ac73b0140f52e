"""A fio job that can be judged by data (rule 12 of docs/verdicts.md): the rules it must
keep, checked when the scenario is loaded so that a job breaking them is bad input.

The oracle needs every block of a section written exactly once (fio's random map without
``norandommap``, one loop, no time limit, one job, one block size), so that a required
block has one right content. Options that could change that are refused rather than
guessed at. The recorder splits the job (``harness/record/fiojob.py``).
"""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass

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
