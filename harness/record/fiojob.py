"""A fio job made judgeable by data: split into sections, each durable at its own mark.

The scenario's job (one job section, writes only; ``harness/config/fiojob.py`` checks
it) is rewritten as ``sections`` jobs run one after the other (``stonewall``), each
writing its own slice of one file with fio's verify headers (``verify=md5``: every block
carries magic, its own offset and an md5 of its data), ending in fsync (``end_fsync=1``)
and then, through ``exec_postrun``, placing mark ``crashlab:sync:<k>`` in the log --
after the fsync returned, since fio runs the post-run command once the job's I/O, end
fsync included, is done. So at and after mark k every block of sections 1..k must
verify (``harness/model/fioverify.py``, rule 12 of docs/verdicts.md).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from harness.config.fiojob import SectionedJob
from harness.errors import HarnessError

FORMAT = "crashlab-oracle/2"  # harness/model/oracle/'s FORMAT, which checkstate.py loads


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
