"""The check of a mounted crash state against what its last mark requires."""

from __future__ import annotations

import json
from typing import Any

from ..contract import Verdict
from .marks import AFTER_FINAL, FORMAT, profile_of
from .rules import INODE_CHECKS, Found, data, metadata, names, times


class UsageError(Exception):
    """Bad arguments or an unreadable oracle: exit 2."""


def load_oracle(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise UsageError(f"--oracle {path}: {e.strerror}") from None
    except ValueError as e:
        raise UsageError(f"--oracle {path}: not JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"--oracle {path}: not a {FORMAT} file")
    return data


def _promise(
    oracle: dict[str, Any], req: dict[str, Any] | None, failed: set[str], exact: bool
) -> str | None:
    """Which promise a failed check broke: the weakest profile that required one of the
    failed names (``posix`` when POSIX alone did), else the run's own."""
    if not failed or req is None:
        return None
    profile = _profile(oracle)
    for weaker, floor in req.get("floors", {}).items():  # weakest first
        if failed & {*floor["names"], *(floor["exact"] if exact else [])}:
            return str(weaker)
    return profile


def _profile(oracle: dict[str, Any]) -> str:
    """The profile a run's oracle judges by (one written before profiles: its fsync_names)."""
    return str(oracle.get("profile", profile_of(bool(oracle.get("fsync_names", True)))))


def requirements(oracle: dict[str, Any], mark: str | None, exact: bool) -> dict[str, Any] | None:
    """What a state whose last mark is ``mark`` must hold (None: nothing)."""
    if mark in AFTER_FINAL and oracle.get("final_mark"):
        mark, exact = oracle["final_mark"], True  # nothing happened after the final sync
    elif oracle.get("processes", 1) > 1:
        exact = False  # a call in flight at the mark may be partly in a cut there (procs.py)
    entry: dict[str, Any] | None = next((m for m in oracle["marks"] if m["mark"] == mark), None)
    if entry is None:
        return None
    if not exact:
        return entry
    more = entry["exact"]
    return {
        **entry,
        "files": {**entry["files"], **more["files"]},
        "absent": [*entry["absent"], *more["absent"]],
        "prefixes": {},
        "either": {},
        "until": entry.get("clock"),  # rule 20: cut at the mark, nothing later happened
    }


def verify(root: str, oracle: dict[str, Any], mark: str | None, exact: bool = False) -> Verdict:
    """Check what ``mark`` requires of the tree at ``root`` (the rules of the module
    docstring, checked by ``rules``' modules). OSError reading a required file is
    reported per file (unreadable data is lost data); the caller treats any other
    exception as the lab's own failure."""
    req = requirements(oracle, mark, exact)
    found = Found(root, None if req is None else req.get("until"))
    if req is not None:
        _walk(found, req)
    failed = found.failed()
    # Rule 20 is the run's own profile's (the floors list names, not times).
    named = failed - {m.path for m in found.mismatched if m.stamp is not None}
    return Verdict(
        mark=mark,
        exact=exact,
        known=req is not None,
        profile=_profile(oracle),
        promise=_promise(oracle, req, named, exact or mark in AFTER_FINAL)
        or (_profile(oracle) if failed else None),
        checked=found.checked,
        missing=found.missing,
        mismatched=found.mismatched,
        present=found.present,
        nlink=found.nlink,
        ok=not failed,
    )


def _walk(found: Found, req: dict[str, Any]) -> None:
    """Each requirement of the mark, by the rule that makes it."""
    stamps = req.get("dir_times", {})
    if "" in stamps:
        times.directory(found, "", stamps[""])
    for d in req["dirs"]:
        found.checked += 1
        if names.directory(found, d):
            times.directory(found, d, stamps.get(d))
    for path, want in req["files"].items():
        found.checked += 1
        if "symlink" in want:
            metadata.link(found, path, want["symlink"])
        elif (st := data.content(found, path, want)) is not None:
            any(check(found, path, st, want) for check in INODE_CHECKS)
    for path, want in req.get("prefixes", {}).items():
        found.checked += 1
        data.content(found, path, want, limit=want["size"])
    for path, shas in req.get("either", {}).items():
        found.checked += 1
        names.either(found, path, shas)
    for name in req.get("absent", []):
        found.checked += 1
        names.absent(found, name)
    for name in req.get("named", []):
        found.checked += 1
        names.named(found, name)
