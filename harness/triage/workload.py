"""A run's workload as a shell script a filesystem developer can read and run.

The op generator's workload (``harness/guest/opgen.py``) and a search run's ACE workload
(``harness/guest/ace.py``, its base file set first) are rendered op by op from the
oracle's op list, with fstests' ``xfs_io`` for the calls the shell has no command for.
The oracle keeps each op's offsets and lengths but not its bytes (the generator draws
them from its seed), so the script writes ``xfs_io``'s fill pattern: the same calls,
other bytes. The exact workload is the generator itself; the script says how to run it.
A fio job is written as the guest ran it: judged by data, that is the sectioned job the
recorder wrote (``harness/record/fiojob.py``), marks included, with the run's seed.
Other workloads are named, not rendered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.config import fiojob as fiojobrules
from harness.model import shell
from harness.model.ops import PERSIST_OPS, Op
from harness.model.oracle.doc import OpEntry, OracleDoc
from harness.record import fiojob
from harness.record.recorder import DM_NAME


def script(
    params: Mapping[str, Any],
    oracle: OracleDoc,
    seed: int | None,
    keep: Sequence[int] | None = None,
    ace: Mapping[str, Any] | None = None,
) -> str | None:
    """The workload of a run with ``params`` as a shell script; None when it has none.
    With ``keep``, only those ops of it (by index in the oracle's list) and its final
    sync: the minimal workload triage found (``workmin.py``). ``ace``: a search run's
    workload the oracle is of (its ``seq`` and ``index``)."""
    w = params.get("workload") or {}
    kind = "ace" if ace else w.get("type", "ops")
    if kind == "fio":
        return _fio(w, seed)
    if kind not in ("ops", "ace") or not oracle.ops:
        return None
    noop = bool(w.get("noop_sync"))
    exact = _exact(w, oracle, seed, noop) if ace is None else _exact_ace(ace, noop)
    ops = list(oracle.ops)
    which = [
        "# The run's workload, op by op, rendered from its oracle (harness/triage/workload.py)."
    ]
    if keep is not None:
        ops = [ops[i] for i in keep] + [o for o in ops if o.final]
        which = [
            "# The minimal workload triage found: ops " + ",".join(map(str, keep)) + " of the",
            "# run's workload (and its final sync), rendered from its oracle",
            "# (harness/triage/workload.py); the other ops are left out, in order.",
        ]
    lines = [
        "#!/bin/sh",
        *which,
        "# Rendered, not recorded: offsets, lengths and calls are the run's; the bytes are",
        "# xfs_io's fill pattern (the generator drew its own). The exact workload:",
        f"#   {exact}" + ("  # then ops --keep above only" if keep is not None else ""),
        "# Each '# mark' line is where the run logged a crashlab:sync:N mark in dm-log-writes.",
        "set -e",
        "M=${1:?usage: workload.sh MOUNTPOINT}",
        "",
    ]
    n = 0
    for op in ops:
        line = render(op)
        if op.op in PERSIST_OPS:
            n += 1
            if noop and not op.op.endswith("_write"):
                line = f"# {line}    # not called: the control's fsync does nothing"
            lines += [line, f"# mark crashlab:sync:{n}"]
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def _exact(w: Mapping[str, Any], oracle: OracleDoc, seed: int | None, noop: bool) -> str:
    """The op generator's command that runs the exact workload."""
    # The oracle says how it was generated; a check-log run has no workload settings.
    d = oracle.drawn(w, seed)
    return (
        f'python3 -m harness.guest.opgen run --root "$M" --seed {d.seed} --ops {d.ops} '
        f"--files {d.files} --max-size {d.max_size} --fsync-names "
        f"{'yes' if w.get('fsync_names', True) else 'no'}"
        + (" --noop-sync" if noop else "")
        + (" --extended" if w.get("extended") else "")
        + " --mark-cmd none --oracle /tmp/oracle.json"
    )


def _exact_ace(ace: Mapping[str, Any], noop: bool) -> str:
    """ACE's command that records the exact workload (``crashstate/workloads.py`` adds the
    devices it records on), and the workload in ACE's words."""
    flag = " --noop-sync" if noop else ""
    return (
        f"python3 -m harness.guest.ace record --seq {ace['seq']} --index {ace['index']}{flag}"
        f" ... (ACE seq-{ace['seq']} workload {ace['index']}: {ace.get('ops', '?')})"
    )


def render(entry: OpEntry) -> str:
    """One op of the oracle's list as a shell command (paths under ``$M``)."""
    return step(entry.as_op(shell.PATTERN))


def step(op: Op) -> str:
    """One op as a shell command, or a comment saying why no command does it."""
    try:
        return shell.spell(op, shell.SCRIPT)
    except shell.NoSpelling as e:
        return f"# {e}"


def _fio(w: Mapping[str, Any], seed: int | None) -> str:
    """The fio job the guest ran: split into its marked sections when the run judged the
    states by data (the marks are what its crash states were cut at), with its seed."""
    job, head = str(w["job"]), ["# the run's fio job, as given"]
    if w.get("sections"):
        mark = ["dmsetup", "message", DM_NAME, "0", "mark"]
        job = fiojob.render(fiojobrules.parse(job, int(w["sections"])), mark)
        head = [
            f"# the run's fio job as the guest ran it: {w['sections']} sections, each fsync'd and",
            f"# then marked in the dm-log-writes device {DM_NAME} (fio ignores a failed mark:",
            "# without that device the job runs the same, unmarked). Run it in the mounted",
            "# filesystem's directory: fio --directory=MOUNTPOINT.",
        ]
    run = "fio" + (f" --randseed={seed}" if seed is not None else "") + ' "$@" job.fio'
    lines = ["#!/bin/sh", *head, "cat > job.fio <<'EOF'", job.rstrip("\n"), "EOF", run]
    return "\n".join(lines) + "\n"
