"""``scenario import vdbench FILE``: a vdbench parameter file as a workload scenario with
an equivalent fio job (docs/vdbench.md has the mapping and where it is approximate).

The supported subset is what seeds 000 and 001 use: block workloads (``sd=``/``wd=``/
``rd=`` with xfersize, rdpct, seekpct, rhpct, threads, size, elapsed, interval, iorate),
file workloads (``fsd=``/``fwd=`` with anchor, depth, width, files, size, operation,
fileio, fileselect, stopafter, threads, fwdrate, format) and data deduplication
(dedupunit, dedupratio, dedupsets). Anything else is refused with its name and line: a
silently dropped parameter would make a different workload under the same name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from harness.config.settings import parse_size, size_text
from harness.errors import InputError

MiB = 1 << 20
DEDUP = ("dedupunit", "dedupratio", "dedupsets")
SUPPORTED: dict[str, tuple[str, ...]] = {
    "sd": ("sd", "lun", "size", "threads", *DEDUP),
    "wd": ("wd", "sd", "xfersize", "rdpct", "seekpct", "rhpct", "threads", "iorate"),
    "fsd": ("fsd", "anchor", "depth", "width", "files", "size", *DEDUP),
    "fwd": (
        "fwd",
        "fsd",
        "operation",
        "xfersize",
        "fileio",
        "fileselect",
        "stopafter",
        "threads",
        "fwdrate",
    ),
    "rd": ("rd", "wd", "fwd", "iorate", "fwdrate", "elapsed", "interval", "threads", "format"),
    "general": DEDUP,
}


@dataclass
class Record:
    kind: str  # sd, wd, rd, fsd, fwd, general
    line: int
    params: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # parameter -> its line

    @property
    def name(self) -> str:
        return self.params.get(self.kind, "")


@dataclass
class Imported:
    job: str
    size: int
    runtime: int
    dedup: dict[str, str]
    notes: list[str]


def parse(path: Path, text: str) -> list[Record]:
    """The records of a parameter file; continuation lines (a line ending in a comma) are
    joined, every parameter keeps the line it was on.

    :raise InputError: an unsupported or malformed parameter, with its file and line.
    """
    records: list[Record] = []
    current: Record | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("*", "#", "/")):
            continue
        tokens = [t.strip() for t in _split(line) if t.strip()]
        if current is None:
            key = tokens[0].partition("=")[0].strip().lower()
            current = Record(key if key in SUPPORTED and key != "general" else "general", n)
            records.append(current)
        for tok in tokens:
            key, eq, value = tok.partition("=")
            key = key.strip().lower()
            if not eq or not value.strip():
                raise InputError(f"{path}:{n}: {tok!r} is not a parameter=value pair")
            if key not in SUPPORTED[current.kind]:
                allowed = ", ".join(SUPPORTED[current.kind])
                raise InputError(
                    f"{path}:{n}: parameter {key!r} is not supported by the import"
                    f" ({current.kind} record)",
                    hint=f"supported on {current.kind} lines: {allowed} (docs/vdbench.md)",
                )
            current.params[key] = value.strip()
            current.lines[key] = n
        if not line.endswith(","):
            current = None
    return records


def _split(line: str) -> list[str]:
    """Split on commas outside parentheses (``xfersize=(4k,50,8k,50)`` stays whole)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(line):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(line[start:i])
            start = i + 1
    out.append(line[start:])
    return out


class Mapper:
    """Records -> one fio job, with a note for every approximation."""

    def __init__(self, path: Path, records: list[Record]) -> None:
        self.path = path
        self.records = records
        self.notes: list[str] = []
        self.dedup: dict[str, str] = {}
        self.dedup_lines: dict[str, int] = {}
        for r in records:
            for k in DEDUP:
                if k in r.params:
                    self.dedup[k] = r.params[k]
                    self.dedup_lines[k] = r.lines[k]

    def fail(self, r: Record, key: str, msg: str, hint: str | None = None) -> InputError:
        return InputError(
            f"{self.path}:{r.lines.get(key, r.line)}: {key}={r.params.get(key, '')!r}: {msg}",
            hint=hint,
        )

    def size(self, r: Record, key: str) -> int:
        try:
            return parse_size(r.params[key])
        except ValueError as e:
            raise self.fail(r, key, str(e)) from None

    def number(self, r: Record, key: str, lo: float = 0, hi: float = math.inf) -> float:
        value = r.params[key].rstrip("%")
        try:
            x = float(value)
        except ValueError:
            raise self.fail(r, key, "expected a number") from None
        if not lo <= x <= hi:
            raise self.fail(r, key, f"must be between {lo:g} and {hi:g}")
        return x

    def find(self, kind: str, ref: Record, key: str) -> list[Record]:
        pattern = ref.params[key]
        rx = re.compile("^" + re.escape(pattern).replace(r"\*", ".*") + "$")
        found = [r for r in self.records if r.kind == kind and rx.match(r.name)]
        if not found:
            raise self.fail(ref, key, f"no {kind}= record of that name")
        return found

    def run(self) -> Imported:
        rds = [r for r in self.records if r.kind == "rd"]
        if len(rds) != 1:
            line = rds[1].line if len(rds) > 1 else 1
            raise InputError(
                f"{self.path}:{line}: the import takes exactly one rd= run definition,"
                f" found {len(rds)}",
                hint="split the file, one rd= per scenario",
            )
        rd = rds[0]
        elapsed = int(self.number(rd, "elapsed", 1)) if "elapsed" in rd.params else 30
        if "elapsed" not in rd.params:
            self.notes.append("no elapsed=: vdbench's default of 30 s")
        if "interval" in rd.params:
            self.notes.append(
                f"interval={rd.params['interval']} (line {rd.lines['interval']}): not mapped;"
                " fio reports totals for the run (IOPS, bandwidth, latency percentiles)"
            )
        if "wd" in rd.params:
            sections, size = self.block(rd)
        elif "fwd" in rd.params:
            sections, size = self.files(rd)
        else:
            raise InputError(f"{self.path}:{rd.line}: rd= names neither wd= nor fwd=")
        glob = [
            "[global]",
            "ioengine=psync",
            "size=${SIZE}",
            "runtime=${RUNTIME}",
            "time_based=1",
            *self.dedup_options(sections),
        ]
        job = "\n".join([*glob, "", *sections]) + "\n"
        return Imported(job, size, elapsed, dict(self.dedup), self.notes)

    def rate(self, r: Record, key: str, threads: int) -> list[str]:
        if key not in r.params or r.params[key].lower() == "max":
            return []
        per = math.ceil(self.number(r, key, 1) / threads)
        self.notes.append(f"{key}={r.params[key]}: rate_iops={per} per fio job ({threads} jobs)")
        return [f"rate_iops={per}"]

    def block(self, rd: Record) -> tuple[list[str], int]:
        sections, size = [], 0
        for wd in self.find("wd", rd, "wd"):
            if "sd" not in wd.params:
                raise InputError(f"{self.path}:{wd.line}: wd= without sd=")
            sd = self.find("sd", wd, "sd")[0]
            if "lun" not in sd.params:
                raise InputError(f"{self.path}:{sd.line}: sd= without lun=")
            size = size or (self.size(sd, "size") if "size" in sd.params else 0)
            if not size:
                raise InputError(
                    f"{self.path}:{sd.line}: sd= without size=",
                    hint="the file's size must be given (size=1g)",
                )
            holder = next((r for r in (rd, wd, sd) if "threads" in r.params), None)
            threads = int(self.number(holder, "threads", 1)) if holder else 1
            rdpct = self.number(wd, "rdpct", 0, 100) if "rdpct" in wd.params else 100.0
            seek = wd.params.get("seekpct", "100").lower()
            if seek in ("seq", "sequential", "eof"):
                seekpct = 0.0
            else:  # vdbench's default is 100: every I/O seeks (random)
                seekpct = self.number(wd, "seekpct", 0, 100) if "seekpct" in wd.params else 100.0
            opts = [
                f"[{wd.name}]",
                f"filename={PurePosixPath(sd.params['lun']).name}",
                f"bs={self.xfer(wd)}",
                *self.rw(rdpct, seekpct > 0),
            ]
            if 0 < seekpct < 100:
                opts.append(f"percentage_random={seekpct:g}")
            if "rhpct" in wd.params:
                opts += self.hits(wd, size, seekpct)
            opts += [f"numjobs={threads}"] if threads > 1 else []
            opts += self.rate(rd, "iorate", threads) + self.rate(wd, "iorate", threads)
            self.notes.append(
                f"lun={sd.params['lun']}: a file of that name in the filesystem under test"
            )
            sections += [*opts, ""]
        return sections, size

    def rw(self, rdpct: float, random: bool) -> list[str]:
        pre = "rand" if random else ""
        if rdpct >= 100:
            return [f"rw={pre}read"]
        if rdpct <= 0:
            return [f"rw={pre}write"]
        return [f"rw={'randrw' if random else 'readwrite'}", f"rwmixread={rdpct:g}"]

    def xfer(self, r: Record) -> str:
        if "xfersize" not in r.params:
            return "4k"
        if r.params["xfersize"].startswith("("):
            raise self.fail(
                r,
                "xfersize",
                "a distribution of transfer sizes is not supported",
                "give one size, e.g. xfersize=4k",
            )
        return size_text(self.size(r, "xfersize")).lower()

    def hits(self, wd: Record, size: int, seekpct: float) -> list[str]:
        rh = self.number(wd, "rhpct", 0, 100)
        if seekpct == 0:
            self.notes.append(f"rhpct={rh:g}: ignored, the workload is sequential")
            return []
        area = max(0.01, round(100 * MiB / size, 2))
        self.notes.append(
            f"rhpct={rh:g} (line {wd.lines['rhpct']}): approximated as random_distribution="
            f"zoned, {rh:g} % of random I/O to the first {area:g} % of the file (vdbench's 1 MiB"
            " hit area at the imported size); vdbench aims only reads at the hit area and"
            " relies on the cache, fio skews reads and writes alike"
        )
        return [f"random_distribution=zoned:{rh:g}/{area:g}:{100 - rh:g}/{100 - area:g}"]

    def files(self, rd: Record) -> tuple[list[str], int]:
        sections, size = [], 0
        for fwd in self.find("fwd", rd, "fwd"):
            fsd = self.find("fsd", fwd, "fsd")[0]
            depth = int(self.number(fsd, "depth", 0)) if "depth" in fsd.params else 0
            width = int(self.number(fsd, "width", 1)) if "width" in fsd.params else 1
            nfiles = width**depth * int(
                self.number(fsd, "files", 1) if "files" in fsd.params else 1
            )
            each = self.size(fsd, "size") if "size" in fsd.params else MiB
            size = size or nfiles * each
            op = fwd.params.get("operation", "read").lower()
            if op not in ("read", "write"):
                raise self.fail(
                    fwd,
                    "operation",
                    "only read and write map to fio",
                    "fio has no metadata operations (create, delete, getattr, ...)",
                )
            fileio = fwd.params.get("fileio", "random").lower()
            if fileio not in ("random", "sequential"):
                raise self.fail(fwd, "fileio", "expected random or sequential")
            threads = int(self.number(fwd, "threads", 1)) if "threads" in fwd.params else 1
            select = {"random": "random", "sequential": "sequential"}.get(
                fwd.params.get("fileselect", "random").lower()
            )
            if select is None:
                raise self.fail(fwd, "fileselect", "expected random or sequential")
            if "stopafter" in fwd.params:
                select += f":{int(self.number(fwd, 'stopafter', 1))}"
            opts = [
                f"[{fwd.name}]",
                f"rw={'rand' if fileio == 'random' else ''}{op}",
                f"bs={self.xfer(fwd)}",
                f"nrfiles={nfiles}",
                f"filename_format={fsd.name}.$filenum",
                f"file_service_type={select}",
            ]
            if rd.params.get("format", "no").lower() in ("yes", "restart") and op == "write":
                opts.append("overwrite=1")
            opts += [f"numjobs={threads}"] if threads > 1 else []
            opts += self.rate(rd, "fwdrate", threads)
            self.notes.append(
                f"fsd={fsd.name}: depth={depth}, width={width} -> {nfiles} files of"
                f" ${{SIZE}}/{nfiles} each in one directory (fio makes no directory tree);"
                f" anchor={fsd.params.get('anchor', '-')} is the filesystem under test's mount"
            )
            sections += [*opts, ""]
        return sections, size

    def dedup_options(self, sections: list[str]) -> list[str]:
        if not self.dedup:
            return []
        out = []
        if "dedupratio" in self.dedup:
            r = Record("general", self.dedup_lines["dedupratio"], self.dedup, self.dedup_lines)
            ratio = self.number(r, "dedupratio", 1)
            out.append(f"dedupe_percentage={round(100 * (1 - 1 / ratio))}")
        if "dedupunit" in self.dedup:
            r = Record("general", self.dedup_lines["dedupunit"], self.dedup, self.dedup_lines)
            unit = size_text(self.size(r, "dedupunit")).lower()
            for s in sections:
                if s.startswith("bs=") and s != f"bs={unit}":
                    raise self.fail(
                        r,
                        "dedupunit",
                        f"differs from the transfer size ({s})",
                        "fio dedupes whole write buffers: make xfersize equal",
                    )
        if "dedupsets" in self.dedup:
            r = Record("general", self.dedup_lines["dedupsets"], self.dedup, self.dedup_lines)
            pct = self.number(r, "dedupsets", 1, 100)
            if any(s.startswith("nrfiles=") and s != "nrfiles=1" for s in sections):
                self.notes.append(
                    f"dedupsets={self.dedup['dedupsets']}: not mapped; fio's working_set mode"
                    " takes one file per job, so duplicates repeat earlier blocks (fio's"
                    " default dedupe_mode=repeat)"
                )
                return out
            out += ["dedupe_mode=working_set", f"dedupe_working_set_percentage={pct:g}"]
            self.notes.append(
                f"dedupsets={self.dedup['dedupsets']}: dedupe_mode=working_set with a working"
                f" set of {pct:g} % of the data (vdbench counts sets of duplicates; fio draws"
                " duplicates from a working set of earlier blocks)"
            )
        return out


def import_file(path: Path) -> dict[str, Any]:
    """The scenario data (before validation) for a vdbench parameter file.

    :raise InputError: an unreadable file, or a parameter outside the subset.
    """
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    m = Mapper(path, parse(path, text))
    imp = m.run()
    if imp.dedup:
        unit = imp.dedup.get("dedupunit", "128k")
        cells: list[dict[str, Any]] = [
            {"type": "zfs", "properties": {"dedup": "on", "recordsize": unit.upper()}},
            {"type": "zfs", "properties": {"dedup": "off", "recordsize": unit.upper()}},
            {"type": "btrfs"},
        ]
    else:
        cells = [{"type": "zfs"}, {"type": "ext4", "data_mode": "ordered"}]
    disk = max(1024 * MiB, math.ceil(imp.size * 2 / (256 * MiB)) * 256 * MiB)
    return {
        "description": f"Imported from {path.name} by `scenario import vdbench`; the fio job"
        " is its equivalent (approximations in the comments and docs/vdbench.md).",
        "kind": "workload",
        "seed": 1,
        "disk_size": size_text(disk),
        "cells": cells,
        "fio": {
            "size": size_text(imp.size),
            "runtime": imp.runtime,
            "origin": str(path),
            "job": imp.job,
        },
        "_notes": imp.notes,
    }
