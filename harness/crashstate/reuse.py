"""When two crash states are the same check, so one verdict serves both (issue 23).

A verdict is a function of the image and of everything the checks bring to it. The
image is the replayer's content identity (``harness/replay/replayer.py``, ``Identity``);
the rest is the *check key*, built here: the run's part once (:func:`context_key`), the
state's part per state (:func:`check_key`). Two states with equal identity and equal
check key would be given the same image, the same programs, the same options and the
same expectations, so checking the second would repeat the first. Anything left out of
the key that a verdict depends on would make reuse unsound, so when in doubt a part is
in: a key that is too fine costs a check, one too coarse costs a wrong verdict.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.check import host
from harness.config.crash import CheckSpec, CrashSpec, FsSpec
from harness.config.settings import canonical_json
from harness.crashstate.run import Run
from harness.model import fioverify, recovery
from harness.model import oracle as guest_oracle
from harness.replay import crashstates
from harness.replay import replayer as replay
from harness.store.model import Judged

# The lab's own judging code: how facts become an outcome (host.py, guest.py) and what
# the guest runs to gather them (checkstate.py and the oracle package it imports).
_HARNESS = Path(__file__).resolve().parents[1]
_JUDGES = (
    "check/host.py",
    "check/guest.py",
    *(f"guest/{m}.py" for m in ("checkstate", "apppat", "sqlitepat")),
    *(f"model/{m}.py" for m in ("contract", "ops", "fioverify", "kernlog")),
    *sorted(str(f.relative_to(_HARNESS)) for f in (_HARNESS / "model" / "oracle").glob("*.py")),
)


@functools.cache
def _judges_digest() -> str:
    h = hashlib.sha256()
    for rel in _JUDGES:
        h.update(rel.encode() + b"\0" + (_HARNESS / rel).read_bytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Reuse:
    """What ``check_sources`` needs to find a state's twin: the run's part of the check
    key (:func:`context_key`), the run's id (how its own states are named) and the
    store's lookup of states judged in any run (``Store.judged``; None: only twins
    within this call)."""

    context: str
    run_id: str
    judged: Callable[[str, str], Judged | None] | None = None


def for_run(
    run: Run,
    check: CheckSpec,
    crash: CrashSpec,
    fs: FsSpec,
    *,
    kernel: str | None = None,
    across_runs: bool = True,
) -> Reuse:
    """A run's :class:`Reuse`, from its recorded environment (``lifecycle.run_env``);
    ``kernel``: the release the recording saw, if the run row has none."""
    row = run.store.run(run.run_id)
    context = context_key(check, crash, fs, row.guest_kernel or kernel, row.tool_versions)
    return Reuse(context, run.run_id, run.store.judged if across_runs else None)


def counts(run: Run, generated: int) -> dict[str, int]:
    """For a run's summary: its states generated, distinct, checked and reused."""
    return {**run.store.reuse_counts(run.run_id), "generated": generated}


def context_key(
    check: CheckSpec,
    crash: CrashSpec,
    fs: FsSpec,
    guest_kernel: str | None,
    tool_versions: Mapping[str, str],
) -> str:
    """The run's part of every state's check key (canonical JSON). Each part is there
    because a verdict can change with it while the image stays the same:

    - ``identity``: the identity's scheme (block size, hash); identities of another
      scheme are not comparable.
    - ``fs``: the filesystem spec -- type (which checker and which kernel driver), mkfs
      options (what the checker expects, e.g. a journal), mount options and data mode
      (how the kernel recovers and mounts it), disk size.
    - ``kernel``: the guest kernel that mounts the image and replays its journal (its
      release, and the run's ``tool_versions.kernel``: the image's own or which
      ``--kernel`` build, a mutant say).
    - ``tools``: the versions of every package in the check guest's image (e2fsprogs,
      xfsprogs, btrfs-progs ...) -- the run's ``tool_versions`` without ``host``, the
      host's kernel release, which never sees a crash image.
    - ``host_checker``: the host checker's own version (``e2fsck -V``), when host checks
      run: the host's e2fsprogs is not the image's.
    - ``checks``: which checks ran: a state judged by the host checker alone has a
      verdict a guest mount could worsen; which recovery modes mounted it, and whether
      rule 20 judged its times.
    - ``corrupt``: the positive control's damage, applied after replay, is not in the
      identity.
    - ``judges``: a digest of the lab's judging code (host and guest checks, checkstate
      and the oracle), so a fix to how we judge never inherits verdicts of the old code.
    """
    parts = {
        "identity": f"sha256-{replay.IDENTITY_BLOCK}-sum128",
        "fs": fs.model_dump(mode="json"),
        "kernel": {"release": guest_kernel, "source": tool_versions.get("kernel")},
        "tools": {k: v for k, v in tool_versions.items() if k != "host"},
        "host_checker": host.checker_version(str(fs.type)) if check.host else None,
        "checks": {"host": check.host, "guest": check.guest}
        | ({"recovery": list(check.recovery)} if check.recovery != (recovery.RW,) else {})
        | ({} if check.times else {"times": False}),
        "corrupt": crash.corrupt,
        "judges": _judges_digest(),
    }
    return canonical_json(parts)


def check_key(
    context: str, oracle: Mapping[str, Any], state: crashstates.CrashState, size: int
) -> str:
    """A state's check key (hex digest): the run's ``context`` and what the state adds.

    - what the oracle expects of the state (:func:`_expects`): the same image with other
      expectations is another check -- a file required after one mark may be free to be
      missing after an earlier one.
    - the device size: the identity does not see trailing zeros, a checker does.
    """
    key = {"context": context, "expects": _expects(oracle, state), "size": size}
    return hashlib.sha256(canonical_json(key).encode()).hexdigest()


def _expects(oracle: Mapping[str, Any], state: crashstates.CrashState) -> Any:
    """The oracle's requirement for the state (``oracle.requirements`` of its last mark,
    exact or not), which is all ``oracle.verify`` reads. An application pattern's
    classes read the whole oracle at the state's mark, and an oracle ``requirements``
    cannot read (an older format) is judged by whatever the guest makes of it: for those
    the whole oracle, the mark and ``exact`` are the part. A fio workload's: how many sections it
    requires (rule 12). No oracle (fio judged by fsck and mount only): nothing."""
    if not oracle:
        return None
    if oracle.get("fio"):  # how many sections' blocks: exactness changes nothing (rule 12)
        return {"fio": oracle["fio"], "sections": fioverify.requirements(dict(oracle), state.mark)}
    if not oracle.get("pattern"):
        with contextlib.suppress(KeyError, TypeError, StopIteration):
            return guest_oracle.requirements(dict(oracle), state.mark, state.exact)
    return {
        "oracle": hashlib.sha256(canonical_json(oracle).encode()).hexdigest(),
        "mark": state.mark,
        "exact": state.exact,
    }
