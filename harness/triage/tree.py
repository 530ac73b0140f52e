"""Expected vs found: what the oracle requires of a state, beside what its check found.

The expected side is the oracle's requirements at the state's mark (names, sizes, sha256
digests); the found side is what the guest's oracle check reported of the failing
state: a missing name, content of another digest or size. A required file the check
did not report is as expected -- unless the check's note was cut (at 1500 characters),
which the table then says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from harness.model import fioverify
from harness.model.oracle import requirements

CUT = "The check's note was cut at 1500 characters: names past the cut show as expected."


def table(oracle: Mapping[str, Any], mark: str | None, exact: bool, note: str) -> list[str]:
    """Markdown lines: one row per name the oracle requires at ``mark``, expected and
    found (``note``: the check's oracle verdict)."""
    if oracle.get("fio"):
        return _fio_blocks(oracle, mark, note)
    req = requirements(dict(oracle), mark, exact) if oracle else None
    if req is None:
        return [f"The oracle requires nothing at mark {mark!r}."]
    reported = _reported(note)
    rows = ["| name | expected | found |", "|---|---|---|"]
    for d in req.get("dirs", []):
        rows.append(f"| `{d}/` | directory | {reported.get(d + '/', 'as expected')} |")
    kinds = (("files", ""), ("prefixes", "first "), ("either", ""))
    for key, how in kinds:
        for path, want in sorted(req.get(key, {}).items()):
            rows.append(
                f"| `{path}` | {_expected(want, how)} | {reported.get(path, 'as expected')} |"
            )
    for name in req.get("absent", []):
        rows.append(f"| `{name}` | absent | {reported.get(name, 'as expected')} |")
    for name in req.get("named", []):
        rows.append(f"| `{name}` | a file, any content | {reported.get(name, 'as expected')} |")
    if reported.get("", ""):
        rows.append(f"\n{reported['']}")
    return rows


def _expected(want: Any, how: str) -> str:
    if isinstance(want, list):  # rename-over: the old or the new content
        return "sha256 " + " or ".join(f"`{w[:16]}`" for w in want)
    return f"{how}{want['size']} bytes, sha256 `{want['sha256'][:16]}`"


def _reported(note: str) -> dict[str, str]:
    """What the check said of each name ("" holds a remark on the note itself)."""
    try:
        v = json.loads(note) if note else {}
    except json.JSONDecodeError:
        return {"": CUT}
    out: dict[str, str] = {}
    for path in v.get("missing", []):
        out[path] = "**missing**"
    for name in v.get("present", []):
        out[name] = "**present**"
    for m in v.get("mismatched", []):
        if "got" in m and "size" in m:
            out[m["path"]] = f"**{m['size']} bytes, sha256 `{str(m['got'])[:16]}`**"
        elif "prefix" in m:
            out[m["path"]] = f"**{m['size']} bytes (shorter than the prefix)**"
        else:
            out[m["path"]] = (
                "**" + ", ".join(f"{k} {v}" for k, v in m.items() if k != "path") + "**"
            )
    for m in v.get("nlink", []):
        out[m["path"]] = f"**{m['nlink']} links, expected {m['expected']}**"
    return out


def _fio_blocks(oracle: Mapping[str, Any], mark: str | None, note: str) -> list[str]:
    """A fio workload's requirement is blocks, not names (rule 12): which, and what the
    check found of them."""
    fio = oracle["fio"]
    k = fioverify.requirements(dict(oracle), mark) or 0
    blocks = k * int(fio["section_size"]) // int(fio["bs"])
    return [
        f"Rule 12: the first {blocks} blocks of `{fio['file']}` (fio sections 1..{k}) must"
        f" each be fio's own block for its offset. Found: {note or 'as expected'}"
    ]
