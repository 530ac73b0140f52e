"""The oracle document (``oracle.json``) as the host reads it: typed, and decoded in one
place (``OracleDoc.of``).

What the guest writes is one document per recording (``opgen.oracle_doc``, ACE's and an
application pattern's bodies, the fio job's), of format ``FORMAT``: how the workload was
drawn (seed, op count, files, size), the op list (``OpEntry``: ``Op.describe``'s entry
with its index and mark), the final mark, the profile it is judged by, and what each mark
requires. The host reads the first four through attributes; the requirements are the
document's own, read whole by ``requirements``/``verify`` and the guest (``raw``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..contract import Message
from ..ops import Op
from .marks import profile_of


@dataclass(frozen=True, kw_only=True)
class OpEntry(Message):
    """One op of the document's list: the op as ``Op.describe`` says it, its index, and
    the mark placed after it (a persistence op), ``final`` for the workload's last sync,
    ``failed`` for one a full disk failed."""

    SPARSE: ClassVar[bool] = True
    i: int | None = None
    op: str
    path: str | None = None
    dst: str | None = None
    offset: int | None = None
    length: int | None = None
    size: int | None = None
    mode: str | None = None
    name: str | None = None
    fd: str | None = None
    target: str | None = None
    perm: str | None = None  # octal, as describe writes it
    uid: int | None = None
    gid: int | None = None
    mark: str | None = None
    final: bool | None = None
    failed: str | None = None  # the errno a full disk failed it with (fs.fill): ENOSPC
    proc: int | None = None  # the process that called it (workload.processes)

    def described(self) -> dict[str, Any]:
        """The entry as ``Op.describe`` wrote it (no index, mark, final or failure)."""
        drop = ("i", "mark", "final", "failed", "proc")
        return {k: v for k, v in self.to_dict().items() if k not in drop}

    def as_op(self, fill: int = 0) -> Op:
        """The op itself, its bytes (never stored) ``fill``."""
        return Op.from_entry(self.described(), fill)


@dataclass(frozen=True)
class Drawn:
    seed: int | None
    ops: int | None
    files: int | None
    max_size: int | None


@dataclass(frozen=True)
class OracleDoc:
    """A run's oracle document; empty (false) for a run without one."""

    raw: Mapping[str, Any] = field(default_factory=dict)
    ops: tuple[OpEntry, ...] = ()
    final_mark: str | None = None
    profile: str | None = None  # None: no document
    seed: int | None = None
    ops_requested: int | None = None
    files: int | None = None
    max_size: int | None = None
    fsync_names: bool = True

    def __bool__(self) -> bool:
        return bool(self.raw)

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> OracleDoc:
        """The document ``data`` (the JSON the guest wrote), typed; ``{}``/None: none.

        :raise ContractError: an op entry or a field of the wrong shape, named."""
        if not data:
            return cls()
        names = bool(data.get("fsync_names", True))

        def num(key: str) -> int | None:
            value = data.get(key)
            return None if value is None else int(value)

        ops = data.get("ops") or []
        return cls(
            raw=data,
            ops=tuple(OpEntry.from_dict(o, f"oracle.ops[{n}]") for n, o in enumerate(ops)),
            final_mark=data.get("final_mark"),
            # One written before profiles says its fsync_names.
            profile=str(data.get("profile") or profile_of(names)),
            seed=num("seed"),
            ops_requested=num("ops_requested"),
            files=num("files"),
            max_size=num("max_size"),
            fsync_names=names,
        )

    def drawn(self, settings: Mapping[str, Any], seed: int | None) -> Drawn:
        """How the op generator drew the workload: as the document recorded it, else as
        the run's workload ``settings`` and ``seed`` say (a check-log run has none)."""

        def either(recorded: int | None, given: Any) -> Any:
            return given if recorded is None else recorded

        return Drawn(
            seed=either(self.seed, seed),
            ops=either(self.ops_requested, settings.get("ops")),
            files=either(self.files, settings.get("files")),
            max_size=either(self.max_size, settings.get("max_size")),
        )

    def workload_ops(self) -> tuple[OpEntry, ...]:
        """The workload's ops, its final sync excepted."""
        return tuple(o for o in self.ops if not o.final)
