"""Every message between the guest programs and the host, declared once (stdlib only).

The host copies this file into the guest beside the programs (``install_scripts``); a
guest program imports it as ``contract`` and prints its answer with ``to_json()``, the
host reads that answer back with ``from_json()``. Both sides are typed, so mypy sees a
renamed field on either one -- as QEMU's QMP schema or syzkaller's ``rpctype`` do.

Decoding is strict: an unknown field, a missing one, a value of the wrong type or another
``version`` raises :class:`ContractError`, which names the field. The host turns it into
a harness failure (``harness.record.guestmsg``), never a finding.

A command's output crosses as the last :data:`EXCERPT` characters under ``output``: one
size and one name for every program.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, Union

# The contract's version: bump it when a message changes shape, and both sides change.
VERSION = 3  # 2: Stopped.stuck; 3: CheckFacts.verify and FioPremise.verdict a Verdict
# How much of a command's output crosses the boundary (its tail).
EXCERPT = 2000


class ContractError(ValueError):
    """A message that does not follow the contract; ``field`` is its dotted path."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


M = TypeVar("M", bound="Message")


class Message:
    """What every message does: to and from JSON, strictly (module docstring). Each one
    is a frozen, keyword-only dataclass; a message on its own (not a part of another)
    carries ``version``."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = _encode(self)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls: type[M], data: Any, path: str = "") -> M:
        decoded: M = _decode(cls, data, path or cls.__name__)
        return decoded

    @classmethod
    def from_json(cls: type[M], text: str) -> M:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ContractError(f"not JSON ({e})", field=cls.__name__) from None
        return cls.from_dict(data)


def excerpt(text: str) -> str:
    """The tail of a command's output that crosses the boundary."""
    return text[-EXCERPT:]


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        sparse = getattr(value, "SPARSE", False)
        return {
            f.name: _encode(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not (sparse and getattr(value, f.name) is None and _has_default(f))
        }
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode(kind: Any, data: Any, path: str) -> Any:
    if kind is Any:
        return data
    origin = typing.get_origin(kind)
    if origin in (Union, types.UnionType):
        options = typing.get_args(kind)
        if data is None and type(None) in options:
            return None
        given = [o for o in options if o is not type(None)]
        if len(given) == 1:  # X | None: X's own error, which names the field inside it
            return _decode(given[0], data, path)
        errors = []
        for option in given:
            try:
                return _decode(option, data, path)
            except ContractError as e:
                errors.append(e.reason)
        raise ContractError(" or ".join(errors), field=path)
    if origin is list:
        (item,) = typing.get_args(kind)
        _expect(data, list, "a list", path)
        return [_decode(item, v, f"{path}[{i}]") for i, v in enumerate(data)]
    if origin is dict:
        _, item = typing.get_args(kind)
        _expect(data, dict, "an object", path)
        return {k: _decode(item, v, f"{path}.{k}") for k, v in data.items()}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _decode_fields(kind, data, path)
    if kind is float:
        if isinstance(data, int | float) and not isinstance(data, bool):
            return float(data)
        raise ContractError(f"expected a number, got {_shown(data)}", field=path)
    if kind in (int, str, bool):
        if type(data) is kind:
            return data
        raise ContractError(f"expected {kind.__name__}, got {_shown(data)}", field=path)
    if kind is type(None):
        _expect(data, type(None), "null", path)
        return None
    raise ContractError(f"the contract cannot read {kind!r}", field=path)


def _decode_fields(kind: type, data: Any, path: str) -> Any:
    _expect(data, dict, "an object", path)
    hints = typing.get_type_hints(kind)
    names = [f.name for f in dataclasses.fields(kind)]
    if unknown := sorted(set(data) - set(names)):
        raise ContractError("unknown field", field=f"{path}.{unknown[0]}")
    # A sparse message (the oracle's documents) leaves out what it does not say.
    optional = {f.name for f in dataclasses.fields(kind) if _has_default(f)}
    absent = optional if getattr(kind, "SPARSE", False) else set()
    if missing := [n for n in names if n not in data and n not in absent]:
        raise ContractError("missing field", field=f"{path}.{missing[0]}")
    values = {n: _decode(hints[n], data[n], f"{path}.{n}") for n in names if n in data}
    if "version" in values and values["version"] != VERSION:
        raise ContractError(
            f"version {values['version']}, this side reads {VERSION}", field=f"{path}.version"
        )
    return kind(**values)


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _expect(data: Any, kind: type, said: str, path: str) -> None:
    if not isinstance(data, kind):
        raise ContractError(f"expected {said}, got {_shown(data)}", field=path)


def _shown(data: Any) -> str:
    return f"{type(data).__name__} {json.dumps(data)[:60]}"


# -- parts of messages ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Command(Message):
    """What a command did, as ``runner.Ran.record()`` gives it: rc -1 when killed at its
    timeout (its output then ends with ``[timed out]``)."""

    argv: list[str]
    rc: int
    seconds: float
    output: str  # the last EXCERPT characters of stdout then stderr

    def as_step(self, name: str) -> Step:
        return Step(step=name, argv=self.argv, rc=self.rc, seconds=self.seconds, output=self.output)


@dataclass(frozen=True, kw_only=True)
class Step(Command):
    """A named command of a program that runs several (dropremount, ioprobe)."""

    step: str


# -- the oracle's verdict -------------------------------------------------------------
# What verify (and the fio oracle, rule 12) found on one mounted state. Sparse: a
# mismatch carries only the keys that say what differed, the shape the lab has always
# stored, so a verdict kept in an old store reads the same (oracle/rules.py names the
# rule it broke).


@dataclass(frozen=True, kw_only=True)
class Meta(Message):
    mode: int
    owner: list[int]


@dataclass(frozen=True, kw_only=True)
class Stamp(Message):
    """Rule 20: a time outside what the inode had between its last whole commit and the
    crash (nanoseconds; ``low`` None: no commit held it)."""

    SPARSE: ClassVar[bool] = True
    which: str  # mtime or ctime
    got: int
    low: int | None = None
    high: int


@dataclass(frozen=True, kw_only=True)
class Mismatch(Message):
    """One required file that holds something else; only what differed is set."""

    SPARSE: ClassVar[bool] = True
    path: str
    error: str | None = None  # unreadable
    expected: str | dict[str, str] | None = None  # sha256, xattrs or a link's target
    got: str | None = None
    size: int | None = None
    expected_size: int | None = None
    prefix: int | None = None  # rule 4: the durable prefix's length
    xattrs: dict[str, str] | None = None  # rule 8: what the file has
    metadata: Meta | None = None  # rule 14: what the file has
    expected_mode: int | None = None
    expected_owner: list[int] | None = None
    symlink: str | None = None  # rule 13: what the link reads back
    either: list[str] | None = None  # rule 5: the contents allowed
    offset: int | None = None  # rule 12: a lost block of fio's file ...
    holds: str | None = None  # ... and what it holds instead
    stamp: Stamp | None = None  # rule 20: a time out of its window


@dataclass(frozen=True, kw_only=True)
class NlinkMiss(Message):
    path: str
    nlink: int
    expected: int


@dataclass(frozen=True, kw_only=True)
class Verdict(Message):
    """What a state whose last mark is ``mark`` was required to hold, and what it lost.
    ``blocks``/``lost_blocks``: the fio oracle's block classes (rule 12)."""

    SPARSE: ClassVar[bool] = True
    mark: str | None
    exact: bool
    known: bool
    checked: int
    missing: list[str] = field(default_factory=list)
    mismatched: list[Mismatch] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    nlink: list[NlinkMiss] = field(default_factory=list)
    ok: bool
    profile: str | None = None
    promise: str | None = None
    blocks: dict[str, dict[str, int]] | None = None
    lost_blocks: int | None = None
    error: str | None = None  # the tree could not be read at all (a finding)


# -- checkstate.py ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CheckRequest(Message):
    """Check one crash image (checkstate.py: one request per line of its FIFO, or argv)."""

    dev: str
    fs: str
    mount_opts: str = ""
    mountpoint: str = "/mnt/check"
    oracle: str = ""  # the oracle file; "" mounts and checks only
    mark: str = ""  # the state's last mark
    exact: bool = False  # the state is cut exactly at ``mark`` (nothing after)
    timeout: float = 300.0
    # Recovery modes beside the read-write mount (model/recovery.py): each before it on
    # an overlay, ``remount`` after it.
    modes: list[str] = field(default_factory=list)
    # fs.devices = 2: the second device (named in mount_opts; a mode's overlay replaces
    # it there), and what the checker is told of it (e2fsck -j, xfs_repair -l)
    dev2: str = ""
    fsck_flags: list[str] = field(default_factory=list)
    version: int = VERSION


@dataclass(frozen=True, kw_only=True)
class ModeFacts(Message):
    """One recovery mode's facts (model/recovery.py): its mount, the oracle's verdict of
    what it showed, its umount; ``changed``: for ``remount``, what the second mount shows
    differently from the first (paths); ``error``: the lab could not set the mode up."""

    SPARSE: ClassVar[bool] = True
    mode: str
    mount: Command | None = None
    verify: Verdict | None = None
    umount: Command | None = None
    changed: list[str] | None = None
    error: str = ""


@dataclass(frozen=True, kw_only=True)
class CheckFacts(Message):
    """checkstate.py's raw facts of one state; the host judges them (check/guest.judge).

    ``serve_error``: the checker itself failed on the request (its traceback); the rest
    is then empty. ``verify`` is the oracle's verdict (oracle.verify, fioverify.verify:
    ``ok`` and what broke), ``verify_error`` the verifier's own failure, ``classes`` an
    application pattern's per-file classes (apppat.classify)."""

    dev: str = ""
    before_mount: Command | None = None  # a log replay the fs needs before mounting (JFS)
    mount: Command | None = None
    kmsg: list[str] = field(default_factory=list)  # the mount's recovery, in its words
    verify: Verdict | None = None
    verify_error: str = ""
    classes: list[dict[str, Any]] = field(default_factory=list)
    umount: Command | None = None
    fsck: Command | None = None
    repair: Command | None = None
    fsck_after_repair: Command | None = None
    disk_errors: list[str] = field(default_factory=list)  # the host's disk failed: void
    modes: list[ModeFacts] = field(default_factory=list)  # the request's other modes
    serve_error: str = ""
    version: int = VERSION


# -- recording -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AceRecord(Message):
    """ace.py record: one workload recorded under its own dm-log-writes log."""

    index: int
    status: str  # recorded, unsupported, invalid or failed
    seconds: float
    oracle: dict[str, Any] | None = None  # the oracle document (oracle.py's format)
    error: str = ""
    kernel: list[str] = field(default_factory=list)  # a lost log's or failed disk's lines
    fill: dict[str, Any] | None = None  # fs.fill: the files left, the fraction used
    version: int = VERSION


@dataclass(frozen=True, kw_only=True)
class FioPremise(Message):
    """fioverify.py: the fio oracle's verdict on the live filesystem after the job."""

    verdict: Verdict  # ``ok`` and the block classes (fioverify.verify)
    version: int = VERSION


@dataclass(frozen=True, kw_only=True)
class ZfsRound(Message):
    """zfsload.py round: one round's files and their digests."""

    round: int
    files: dict[str, str]  # name -> sha256
    touched: list[str]
    version: int = VERSION


@dataclass(frozen=True, kw_only=True)
class ZfsVerify(Message):
    """zfsload.py verify: the files a state must hold, found or not."""

    ok: bool
    checked: int
    missing: list[str]
    mismatched: list[str]
    version: int = VERSION


# -- recovery times ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Usage(Message):
    """What a mounted filesystem says it holds (btrfs reports no inode counts: 0)."""

    files: int
    dirs: int
    inodes_used: int
    inodes_total: int
    blocks_used: int
    block_size: int


@dataclass(frozen=True, kw_only=True)
class Populated(Message):
    """recoveryload.py populate; a failed mkfs, mount or fallocate stops it there."""

    mkfs: Command
    mount: Command | None = None
    fallocate: Command | None = None  # the one that failed, if any did
    populate_seconds: float = 0.0
    usage: Usage | None = None
    version: int = VERSION


@dataclass(frozen=True, kw_only=True)
class Churning(Message):
    """recoveryload.py churn: the detached loop's pid."""

    pid: int
    version: int = VERSION


@dataclass(frozen=True, kw_only=True)
class Stopped(Message):
    """recoveryload.py stop."""

    stopped: bool
    was_running: bool
    seconds: float
    # Where a churn that would not die was waiting: its kernel stack and the kernel's
    # list of blocked tasks (sysrq w), so a hang names its place.
    stuck: str = ""
    version: int = VERSION


@dataclass(frozen=True, kw_only=True)
class Replayed(Message):
    """recoveryload.py replay: a crash image mounted (its recovery timed) and counted."""

    mount: Command
    before_mount: Command | None = None
    usage: Usage | None = None
    umount: Command | None = None
    disk_errors: list[str] = field(default_factory=list)
    kernel_log: list[str] = field(default_factory=list)
    version: int = VERSION


# -- probes --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WorkloadEnd(Message):
    """How the op workload ended (opgen.execute): ``error`` the op that failed."""

    complete: bool
    error: str | None
    final_mark: str | None


@dataclass(frozen=True, kw_only=True)
class DropPoint(Message):
    """dropremount.py: one sync point with the disk dropped there, remounted, checked."""

    at: int
    mark: str
    steps: list[Step]
    workload: WorkloadEnd | None = None
    switched: bool = False  # the fault was switched on at ``mark``
    check: CheckFacts | None = None
    failed: str = ""  # the setup step that failed (the lab's problem)


@dataclass(frozen=True, kw_only=True)
class DropResult(Message):
    points: list[DropPoint]
    version: int = VERSION


@dataclass(frozen=True, kw_only=True)
class Call(Message):
    """A call a probe made in a forked child (eioprobe.in_child): errno 0 and what it
    returned (``value``), the errno of the OSError it raised, or ``error`` "blocked"
    past its timeout ("skipped" after one blocked)."""

    SPARSE: ClassVar[bool] = True
    errno: int | None = None
    error: str | None = None
    value: str | int | None = None
    seconds: float | None = None


@dataclass(frozen=True, kw_only=True)
class ProbeStep(Call):
    """One step of a probe: a call (``Call``'s fields) or a command's record (``rc``
    -1 when killed at its timeout, None when skipped)."""

    step: str
    argv: list[str] | None = None
    rc: int | None = None
    output: str | None = None


@dataclass(frozen=True, kw_only=True)
class EioFacts(Message):
    """eioprobe.py: each step a command's record (``rc``, ``output``) or a call's in a
    child (``errno``, ``error``, ``value``); ``error`` "blocked" or "skipped" past a hang."""

    steps: list[ProbeStep]
    kernel_log: list[str]
    version: int = VERSION


@dataclass(frozen=True, kw_only=True)
class DustFacts(Message):
    """dustprobe.py: the commands by name (zfs: dm0.., create, write, export, badblocks,
    import, scrub, badblocks_after; ext4: dm, mkfs, mount, umount, badblocks,
    mount_again) and what was measured."""

    fs: str
    commands: dict[str, Command]
    layout: str = ""
    bad_disk: int | None = None
    sha_before: list[str] = field(default_factory=list)
    sha_after: list[str] = field(default_factory=list)
    scrub_seconds: float = 0.0
    status: str = ""  # zpool status -j, whole
    file_block: int | None = None
    read: Call | None = None  # ext4: the read of the bad block, in a child
    version: int = VERSION


@dataclass(frozen=True, kw_only=True)
class IoFacts(Message):
    """ioprobe.py: one workload cell measured (its module docstring). Each step has
    ``step``, ``rc``, ``output`` and ``stderr`` (a command's ``argv`` and ``seconds``
    too); ``space`` holds the space commands' stdout whole, by name."""

    fs: str
    steps: list[dict[str, Any]]
    failed: str = ""  # the setup step that failed: nothing was measured
    seconds: float | None = None
    cpu: dict[str, float] = field(default_factory=dict)
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    space: dict[str, str] = field(default_factory=dict)
    version: int = VERSION
